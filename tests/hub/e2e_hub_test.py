"""End-to-end tests of models by hub id: the real `sluice` against the test hub (fake_hub.py, the hub's
endpoints over plain HTTP with a CDN beside it, serving the bundled model's files). Nothing reaches the
internet. Exit 77 (ctest SKIP_RETURN_CODE) when the binary or model is missing."""
import argparse
import hashlib
import http.client
import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_hub import FakeHub, git_blob_sha1  # noqa: E402

SLUICE = None
MODEL = None
REPO = "sluice-test/tiny-code-qwen2"
NEEDED = ["chat_template.jinja", "config.json", "generation_config.json", "model-00001-of-00002.safetensors",
          "model-00002-of-00002.safetensors", "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"]


class HubTestCase(unittest.TestCase):
    def setUp(self):
        self.hub = FakeHub(MODEL)
        self.tmp = tempfile.mkdtemp(prefix="sluice-hub-")
        self.cache = os.path.join(self.tmp, "hub")
        self.repo_folder = os.path.join(self.cache, "models--" + REPO.replace("/", "--"))

    def tearDown(self):
        self.hub.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def env(self, **extra):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_"))}
        env.update(HF_ENDPOINT=self.hub.endpoint, HF_HUB_CACHE=self.cache, HF_HOME=os.path.join(self.tmp, "home"))
        env.update(extra)
        return env

    def sluice(self, *args, timeout=120, **env):
        return subprocess.run([SLUICE, *args], env=self.env(**env), capture_output=True, text=True, timeout=timeout)

    def download(self, repo=REPO, **env):
        return self.sluice("download", repo, **env)

    def commit(self, repo=REPO):
        return self.hub.repos[repo].commit

    def assert_cache_laid_out(self, repo=REPO, folder=None):
        """blobs/<etag>, refs/main holding the commit, snapshots/<commit>/<file> -> ../../blobs/<etag>."""
        folder = folder or self.repo_folder
        source = self.hub.repos[repo]
        with open(os.path.join(folder, "refs", "main")) as f:
            self.assertEqual(f.read(), source.commit)  # the hash alone, no newline, as huggingface_hub writes it
        snapshot = os.path.join(folder, "snapshots", source.commit)
        self.assertEqual(sorted(os.listdir(snapshot)), NEEDED)
        for name in NEEDED:
            link = os.path.join(snapshot, name)
            self.assertTrue(os.path.islink(link), name)
            self.assertEqual(os.readlink(link), "../../blobs/" + source.etag(name))
            with open(link, "rb") as f:
                self.assertEqual(f.read(), source.files[name], name)
        blobs = os.listdir(os.path.join(folder, "blobs"))
        self.assertEqual(sorted(blobs), sorted(source.etag(n) for n in NEEDED))  # no .incomplete left
        return snapshot


class DownloadTest(HubTestCase):
    def test_download_writes_the_huggingface_hub_cache_layout(self):
        r = self.download()
        self.assertEqual(r.returncode, 0, r.stderr)
        snapshot = self.assert_cache_laid_out()
        self.assertEqual(r.stdout.strip(), snapshot)
        source = self.hub.repos[REPO]
        self.assertEqual(source.etag("config.json"), git_blob_sha1(source.files["config.json"]))
        self.assertEqual(source.etag("tokenizer.json"), hashlib.sha256(source.files["tokenizer.json"]).hexdigest())
        # Only the files a model needs: no PyTorch, ONNX or GGUF duplicate, no README.
        for decoy in ("pytorch_model.bin", "onnx", "gguf", "README", "gitattributes"):
            self.assertEqual(self.hub.requests(contains=decoy), [], decoy)
        # The large files came from the CDN, to which the hub redirected (an absolute URL, another host).
        self.assertEqual(len(self.hub.requests("cdn")), 3)
        with open(os.path.join(self.cache, "CACHEDIR.TAG")) as f:
            self.assertTrue(f.read().startswith("Signature: 8a477f597d28d172789f06886806bc55"))

    def test_progress_is_one_line_per_file_when_stderr_is_not_a_terminal(self):
        r = self.download()
        self.assertEqual(r.returncode, 0, r.stderr)
        for name in NEEDED:
            self.assertIn("downloaded %s (" % name, r.stderr)
        self.assertNotIn("\r", r.stderr)
        self.assertIn("MB in", r.stderr)

    def test_progress_bar_on_a_terminal(self):
        self.hub.slow["model-00001-of-00002.safetensors"] = 0.01  # long enough for several redraws
        master, slave = pty.openpty()
        proc = subprocess.Popen([SLUICE, "download", REPO], env=self.env(), stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        output = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        proc.wait(timeout=120)
        proc.stdout.close()
        os.close(master)
        text = output.decode(errors="replace")
        self.assertEqual(proc.returncode, 0, text)
        self.assertIn("\r", text)  # redrawn in place
        self.assertIn(REPO + " [", text)
        self.assertIn("100% 19.4/19.4 MB", text)
        self.assertIn("8/8 files", text)
        self.assertNotIn("downloaded config.json", text)

    def test_a_second_download_finds_the_cache_and_fetches_nothing(self):
        self.assertEqual(self.download().returncode, 0)
        before = len(self.hub.requests())
        r = self.download()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(self.hub.requests()) - before, 1)  # the model info only: is main still that commit?

    def test_two_downloads_at_once_share_the_cache(self):
        self.hub.slow["model-00001-of-00002.safetensors"] = 0.005
        procs = [subprocess.Popen([SLUICE, "download", REPO], env=self.env(), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for p in procs:
            out, err = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, err)
        self.assert_cache_laid_out()
        # One process fetched each large blob; the other waited on its lock and found it whole.
        sha = self.hub.repos[REPO].etag("model-00001-of-00002.safetensors")
        self.assertEqual(len([r for r in self.hub.requests("cdn") if sha in r[2]]), 1)

    def test_a_pinned_commit_writes_no_ref(self):
        r = self.download(REPO + "@" + self.commit())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), os.path.join(self.repo_folder, "snapshots", self.commit()))
        self.assertFalse(os.path.exists(os.path.join(self.repo_folder, "refs")))
        self.assertEqual(self.hub.requests("hub", "GET", "/api/models/%s/revision/%s" % (REPO, self.commit()))[0][1], "GET")

    def test_an_interrupted_transfer_resumes_with_range(self):
        cut = 3 * 1024 * 1024 + 17
        self.hub.cut_once["model-00001-of-00002.safetensors"] = cut
        r = self.download()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_cache_laid_out()
        sha = self.hub.repos[REPO].etag("model-00001-of-00002.safetensors")
        ranges = [h.get("Range") for _, _, path, h in self.hub.requests("cdn") if sha in path]
        self.assertEqual(ranges, [None, "bytes=%d-" % cut])

    def test_a_killed_download_resumes_in_the_next_run(self):
        name = "model-00001-of-00002.safetensors"
        sha = self.hub.repos[REPO].etag(name)
        partial = os.path.join(self.repo_folder, "blobs", sha + ".incomplete")
        self.hub.slow[name] = 0.05
        proc = subprocess.Popen([SLUICE, "download", REPO], env=self.env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline and not (os.path.exists(partial) and os.path.getsize(partial) > 1 << 20):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        have = os.path.getsize(partial)
        self.assertGreater(have, 1 << 20)
        self.assertFalse(os.path.exists(os.path.join(self.repo_folder, "blobs", sha)))
        self.hub.slow.clear()
        r = self.download()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_cache_laid_out()
        ranges = [h.get("Range") for _, _, path, h in self.hub.requests("cdn") if sha in path]
        self.assertEqual(ranges, [None, "bytes=%d-" % have])

    def test_a_corrupted_file_is_detected_by_its_hash_and_deleted(self):
        name = "model-00002-of-00002.safetensors"
        sha = self.hub.repos[REPO].etag(name)
        self.hub.corrupt.add(name)
        r = self.download()
        self.assertEqual(r.returncode, 1)
        self.assertIn(name + ": sha256 mismatch", r.stderr)
        self.assertIn("deleted", r.stderr)
        blobs = os.listdir(os.path.join(self.repo_folder, "blobs"))
        self.assertNotIn(sha, blobs)
        self.assertNotIn(sha + ".incomplete", blobs)
        snapshot = os.path.join(self.repo_folder, "snapshots", self.commit())
        self.assertFalse(os.path.lexists(os.path.join(snapshot, name)))
        # Fixed on the hub's side: the next run completes.
        self.hub.corrupt.clear()
        r = self.download()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_cache_laid_out()

    def test_a_gated_repo_without_a_token_is_refused_with_a_clear_message(self):
        r = self.download("sluice-test/gated-qwen2")
        self.assertEqual(r.returncode, 1)
        self.assertIn("sluice-test/gated-qwen2 is a gated model (HTTP 401)", r.stderr)
        self.assertIn("accept its conditions at %s/sluice-test/gated-qwen2" % self.hub.endpoint, r.stderr)
        self.assertIn("HF_TOKEN", r.stderr)
        r = self.download("sluice-test/gated-qwen2", HF_TOKEN="hf_wrong")
        self.assertEqual(r.returncode, 1)
        self.assertIn("the token from HF_TOKEN", r.stderr)

    def test_a_gated_repo_with_a_token_downloads_and_the_cdn_never_sees_the_token(self):
        r = self.download("sluice-test/gated-qwen2", HF_TOKEN=FakeHub.TOKEN)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_cache_laid_out("sluice-test/gated-qwen2", os.path.join(self.cache, "models--sluice-test--gated-qwen2"))
        self.assertTrue(all(h.get("Authorization") == "Bearer " + FakeHub.TOKEN for _, _, _, h in self.hub.requests("hub")))
        self.assertTrue(all("Authorization" not in h for _, _, _, h in self.hub.requests("cdn")))

    def test_the_token_file_of_huggingface_hub_is_used(self):
        os.makedirs(os.path.join(self.tmp, "home"))
        with open(os.path.join(self.tmp, "home", "token"), "w") as f:
            f.write(FakeHub.TOKEN + "\n")
        r = self.download("sluice-test/gated-qwen2")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_renamed_repo_is_followed_through_relative_redirects(self):
        r = self.download("sluice-test/old-name")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(len(self.hub.requests("hub", "HEAD", "/sluice-test/old-name/resolve/")), len(NEEDED))
        self.assertEqual(len(self.hub.requests("hub", "HEAD", "/sluice-test/tiny-code-qwen2/resolve/")), len(NEEDED))

    def test_a_missing_repo_or_revision_is_an_error_naming_it(self):
        r = self.download("sluice-test/nope")
        self.assertEqual(r.returncode, 1)
        self.assertIn("sluice-test/nope: repository not found", r.stderr)
        r = self.download(REPO + "@v9")
        self.assertEqual(r.returncode, 1)
        self.assertIn("revision not found", r.stderr)
        r = self.sluice("download", "not--valid/x")
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot contain '--'", r.stderr)

    def test_an_unreachable_hub_is_an_error_naming_it(self):
        r = self.download(HF_ENDPOINT="http://127.0.0.1:9")
        self.assertEqual(r.returncode, 1)
        self.assertIn("cannot reach the hub", r.stderr)


class TlsTest(unittest.TestCase):
    """The real hub is HTTPS: the same protocol over TLS, the certificate checked against the trust store
    (SSL_CERT_FILE here: a certificate made for the test) and against the host name."""

    def setUp(self):
        if not shutil.which("openssl"):
            self.skipTest("needs the openssl command to make a certificate")
        self.tmp = tempfile.mkdtemp(prefix="sluice-hub-tls-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def certificate(self, name, alt_names):
        cert, key = os.path.join(self.tmp, name + ".pem"), os.path.join(self.tmp, name + ".key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "1", "-subj", "/CN=" + name, "-addext", "subjectAltName=" + alt_names],
                       check=True, capture_output=True)
        return cert, key

    def download(self, tls, trusted):
        hub = FakeHub(MODEL, tls=tls)
        self.addCleanup(hub.close)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "SSL_CERT"))}
        env.update(HF_ENDPOINT=hub.endpoint, HF_HUB_CACHE=os.path.join(self.tmp, "hub"), SSL_CERT_FILE=trusted)
        return hub, subprocess.run([SLUICE, "download", REPO], env=env, capture_output=True, text=True, timeout=120)

    def test_download_over_https_checks_the_certificate(self):
        good = self.certificate("localhost", "DNS:localhost,IP:127.0.0.1")
        hub, r = self.download(good, trusted=good[0])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(hub.endpoint.startswith("https://"))
        self.assertEqual(len(hub.requests("cdn")), 3)

    def test_an_untrusted_certificate_is_refused(self):
        good = self.certificate("localhost", "DNS:localhost,IP:127.0.0.1")
        other = self.certificate("other", "DNS:other.example")
        hub, r = self.download(good, trusted=other[0])
        self.assertEqual(r.returncode, 1)
        self.assertIn("TLS handshake with 127.0.0.1 failed", r.stderr)
        self.assertIn("certificate verify failed", r.stderr)

    def test_a_certificate_for_another_host_is_refused(self):
        wrong = self.certificate("other", "DNS:other.example")
        hub, r = self.download(wrong, trusted=wrong[0])
        self.assertEqual(r.returncode, 1)
        self.assertIn("TLS handshake with 127.0.0.1 failed", r.stderr)


class CacheTest(HubTestCase):
    def write_cache_as_huggingface_hub_does(self):
        """The layout huggingface_hub 1.x writes, built by hand: blobs by ETag, refs/main, relative links."""
        source = self.hub.repos[REPO]
        snapshot = os.path.join(self.repo_folder, "snapshots", source.commit)
        os.makedirs(os.path.join(self.repo_folder, "blobs"))
        os.makedirs(os.path.join(self.repo_folder, "refs"))
        os.makedirs(snapshot)
        for name in NEEDED:
            with open(os.path.join(self.repo_folder, "blobs", source.etag(name)), "wb") as f:
                f.write(source.files[name])
            os.symlink("../../blobs/" + source.etag(name), os.path.join(snapshot, name))
        with open(os.path.join(self.repo_folder, "refs", "main"), "w") as f:
            f.write(source.commit)
        return snapshot

    def info(self, model, **env):
        r = self.sluice("info", "--model", model, "--json", **env)
        return r, (json.loads(r.stdout) if r.returncode == 0 else None)

    def test_a_cache_written_by_huggingface_hub_is_found_by_name_offline(self):
        self.write_cache_as_huggingface_hub_does()
        r, info = self.info(REPO, HF_HUB_OFFLINE="1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(info["architecture"], "qwen2")
        r, _ = self.info(REPO + "@" + self.commit(), HF_HUB_OFFLINE="1")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.hub.requests(), [])

    def test_a_commit_already_cached_needs_no_request(self):
        self.write_cache_as_huggingface_hub_does()
        r, _ = self.info(REPO + "@" + self.commit())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.hub.requests(), [])

    def test_the_cache_root_follows_hf_home_when_hf_hub_cache_is_unset(self):
        self.write_cache_as_huggingface_hub_does()
        home = os.path.join(self.tmp, "hfhome")
        os.makedirs(home)
        os.rename(self.cache, os.path.join(home, "hub"))
        env = self.env(HF_HUB_OFFLINE="1", HF_HOME=home)
        del env["HF_HUB_CACHE"]
        r = subprocess.run([SLUICE, "info", "--model", REPO], env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_offline_mode_never_touches_the_network(self):
        r, _ = self.info(REPO, HF_HUB_OFFLINE="1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("HF_HUB_OFFLINE is set and %s is not in the cache" % REPO, r.stderr)
        r = self.download(HF_HUB_OFFLINE="true")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(self.hub.requests(), [])

    def test_an_incomplete_snapshot_is_not_used_offline(self):
        snapshot = self.write_cache_as_huggingface_hub_does()
        os.remove(os.path.join(snapshot, "model-00002-of-00002.safetensors"))
        r, _ = self.info(REPO, HF_HUB_OFFLINE="1")
        self.assertEqual(r.returncode, 1)
        self.assertIn("lacks model-00002-of-00002.safetensors", r.stderr)

    def test_only_the_missing_files_of_a_partial_snapshot_are_downloaded(self):
        snapshot = self.write_cache_as_huggingface_hub_does()
        os.remove(os.path.join(snapshot, "tokenizer.json"))
        os.remove(os.path.join(self.repo_folder, "blobs", self.hub.repos[REPO].etag("tokenizer.json")))
        r = self.download()
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assert_cache_laid_out()
        self.assertEqual([p for _, _, p, _ in self.hub.requests("hub", "HEAD")],
                         ["/%s/resolve/%s/tokenizer.json" % (REPO, self.commit())])

    def test_the_hub_unreachable_falls_back_to_the_cached_snapshot_with_a_warning(self):
        self.write_cache_as_huggingface_hub_does()
        r, _ = self.info(REPO, HF_ENDPOINT="http://127.0.0.1:9")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("using the cached snapshot " + self.commit(), r.stderr)


class ServeTest(HubTestCase):
    def start(self, *extra, **env):
        proc = subprocess.Popen([SLUICE, "serve", "--model", REPO, "--port", "0", "--threads", "2", *extra],
                                env=self.env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (proc.poll() is None and proc.kill(), proc.wait(), proc.stdout.close(), proc.stderr.close()))
        return proc

    @staticmethod
    def get(port, path):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request("GET", path)
            res = conn.getresponse()
            return res.status, json.loads(res.read())
        finally:
            conn.close()

    def test_serve_by_hub_id_reports_download_progress_on_health_then_serves_org_name(self):
        self.hub.slow["model-00001-of-00002.safetensors"] = 0.02
        proc = self.start()
        line = proc.stdout.readline()
        self.assertTrue(line.startswith("sluice loading: http://127.0.0.1:"), line)
        port = int(line.split("http://127.0.0.1:")[1].split(" ")[0])
        seen = []
        while True:  # polled without pause: the handover to the server must refuse or drop no connection
            status, body = self.get(port, "/health")
            if status == 200:
                break
            self.assertEqual(status, 503)
            self.assertEqual(body["status"], "loading")
            self.assertEqual(body["model"], REPO)
            seen.append(body["download"])
            if body["download"]["bytes_done"] > 0:
                self.hub.slow.clear()
        downloading = [d for d in seen if d["phase"] == "downloading"]
        self.assertTrue(downloading, seen)
        self.assertEqual(downloading[-1]["files_total"], len(NEEDED))
        self.assertEqual(downloading[-1]["bytes_total"], sum(len(self.hub.repos[REPO].files[n]) for n in NEEDED))
        self.assertTrue(any(0 < d["bytes_done"] < d["bytes_total"] for d in downloading), downloading)
        ready = proc.stdout.readline()
        self.assertIn("sluice ready: http://127.0.0.1:%d model=%s" % (port, REPO), ready)
        status, models = self.get(port, "/v1/models")
        self.assertEqual(models["data"][0]["id"], REPO)

    def test_alias_overrides_the_served_id(self):
        proc = self.start("--alias", "tiny")
        self.assertTrue(proc.stdout.readline().startswith("sluice loading:"))
        ready = proc.stdout.readline()
        self.assertIn(" model=tiny ", ready)
        port = int(ready.split("http://127.0.0.1:")[1].split(" ")[0])
        self.assertEqual(self.get(port, "/v1/models")[1]["data"][0]["id"], "tiny")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "def f(", "max_tokens": 2}),
                     headers={"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
        conn.close()
        self.assertEqual(answer["model"], "tiny")
        self.assertEqual(len(answer["choices"]), 1)

    def test_a_failed_download_ends_serve_with_the_reason(self):
        proc = self.start(HF_HUB_OFFLINE="1")
        self.assertEqual(proc.wait(timeout=60), 1)
        self.assertIn("HF_HUB_OFFLINE is set", proc.stderr.read())


def main():
    global SLUICE, MODEL
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluice", required=True)
    parser.add_argument("--model", required=True)
    args, rest = parser.parse_known_args()
    if not os.path.exists(args.sluice) or not os.path.exists(os.path.join(args.model, "config.json")):
        print("skipped: needs the sluice binary and the bundled model")
        return 77
    SLUICE, MODEL = args.sluice, args.model
    result = unittest.main(argv=[sys.argv[0], *rest], exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
