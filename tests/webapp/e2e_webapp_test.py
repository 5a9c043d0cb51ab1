"""End-to-end tests of the web app's server side: the real `sluice serve` (with --api-key) and the test hub
(tests/hub/fake_hub.py) — the embedded files and their headers, the key on /v1 and not on the page, the ready
line's URLs, /v1/server, hub search proxied to HF_ENDPOINT, downloads into the cache with progress, and the
cache listing with its fits indicator. Exit 77 (ctest SKIP_RETURN_CODE) when the binary or model is missing."""
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
sys.path.insert(0, os.path.join(HERE, "..", "hub"))
from fake_hub import FakeHub  # noqa: E402
from sluice_server_harness import Server, run_e2e_tests  # noqa: E402

ARGS = None
KEY = "webapp-test-key"
REPO = "sluice-test/tiny-code-qwen2"
AUTH = {"Authorization": "Bearer " + KEY}


class WebAppServer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.hub = FakeHub(ARGS.model)
        cls.tmp = tempfile.mkdtemp(prefix="sluice-webapp-")
        cls.cache = os.path.join(cls.tmp, "hub")
        cls.saved_env = dict(os.environ)
        for k in list(os.environ):
            if k.startswith(("HF_", "HUGGINGFACE_", "TRANSFORMERS_")):
                del os.environ[k]
        os.environ.update(HF_ENDPOINT=cls.hub.endpoint, HF_HUB_CACHE=cls.cache, HF_HOME=os.path.join(cls.tmp, "home"))
        cls.srv = Server(ARGS.sluice, ARGS.model, "--api-key", KEY, "--cors", "*")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        cls.hub.close()
        os.environ.clear()
        os.environ.update(cls.saved_env)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def get(self, path, headers=None):
        return self.srv.request("GET", path, headers=headers)

    def api(self, method, path, body=None):
        status, _, data = self.srv.request(method, path, body=body, headers=AUTH)
        return status, json.loads(data) if data else None

    def wait_download(self, job_id, timeout=60):
        deadline = time.time() + timeout
        seen = []
        while time.time() < deadline:
            status, job = self.api("GET", "/v1/hub/downloads/" + job_id)
            self.assertEqual(status, 200, job)
            seen.append(job)
            if job["phase"] in ("done", "failed"):
                return job, seen
            time.sleep(0.05)
        self.fail("download %s did not finish: %s" % (job_id, seen[-1]))

    def test_ready_line_names_the_browser_and_sdk_urls(self):
        self.assertIn("sluice ready: " + self.srv.base_url, self.srv.ready_line)
        following = [self.srv.stdout_lines.get(timeout=5), self.srv.stdout_lines.get(timeout=5)]
        self.assertIn("chat in a browser:   %s/\n" % self.srv.base_url, following[0])
        self.assertIn("OpenAI API base URL: %s/v1\n" % self.srv.base_url, following[1])

    def test_page_and_its_files_are_served_without_the_key(self):
        status, headers, body = self.get("/")
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-type"], "text/html; charset=utf-8")
        self.assertIn(b'<script type="module" src="/app/main.js">', body)
        self.assertIn("default-src 'self'", headers["content-security-policy"])
        self.assertEqual(headers["cache-control"], "no-cache")
        for path, kind in [("/index.html", "text/html"), ("/style.css", "text/css"), ("/app/main.js", "text/javascript"),
                           ("/app/chat.js", "text/javascript"), ("/favicon.svg", "image/svg+xml")]:
            status, headers, body = self.get(path)
            self.assertEqual(status, 200, path)
            self.assertTrue(headers["content-type"].startswith(kind), (path, headers["content-type"]))
            self.assertEqual(headers["x-content-type-options"], "nosniff")
            self.assertGreater(len(body), 100, path)

    def test_unchanged_file_revalidates_with_304(self):
        _, headers, _ = self.get("/app/chat.js")
        etag = headers["etag"]
        self.assertRegex(etag, r'^"[0-9a-f]{16}"$')
        status, headers, body = self.get("/app/chat.js", {"If-None-Match": etag})
        self.assertEqual(status, 304)
        self.assertEqual(body, b"")
        self.assertEqual(headers["etag"], etag)
        status, _, _ = self.get("/app/chat.js", {"If-None-Match": '"0000000000000000"'})
        self.assertEqual(status, 200)

    def test_text_files_are_gzipped_for_clients_that_accept_it(self):
        _, plain_headers, plain = self.get("/app/chat.js")
        status, headers, body = self.get("/app/chat.js", {"Accept-Encoding": "gzip"})
        self.assertEqual(status, 200)
        self.assertEqual(headers["content-encoding"], "gzip")
        self.assertEqual(headers["vary"], "Accept-Encoding")
        self.assertEqual(gzip.decompress(body), plain)
        self.assertLess(len(body), len(plain))
        self.assertNotEqual(headers["etag"], plain_headers["etag"])
        self.assertNotIn("content-encoding", plain_headers)
        status, _, _ = self.get("/app/chat.js", {"Accept-Encoding": "gzip", "If-None-Match": headers["etag"]})
        self.assertEqual(status, 304)
        # With --cors '*' the origin is not varied on; a named origin adds itself to Vary (unit tested).

    def test_api_needs_the_key(self):
        for method, path in [("GET", "/v1/server"), ("GET", "/v1/hub/models"), ("GET", "/v1/hub/search?q=tiny"),
                             ("POST", "/v1/hub/downloads"), ("GET", "/v1/hub/downloads"), ("GET", "/v1/hub/downloads/dl-1"),
                             ("GET", "/no-such-file.js")]:
            status, headers, _ = self.srv.request(method, path, body=b"{}" if method == "POST" else None)
            self.assertEqual(status, 401, path)
            self.assertEqual(headers.get("www-authenticate"), "Bearer")

    def test_server_describes_itself(self):
        status, info = self.api("GET", "/v1/server")
        self.assertEqual(status, 200)
        self.assertEqual(info["model"], "tiny-code-qwen2")
        self.assertEqual(info["kv_codec"], "f16")
        self.assertEqual(info["expert_store"], "resident")
        self.assertTrue(info["api_key_required"])
        self.assertEqual(info["defaults"]["temperature"], 0.6)
        plan = info["memory_plan"]
        self.assertGreater(plan["weights_bytes"], 10e6)
        f16 = [k for k in plan["kv"] if k["codec"] == "f16"][0]
        self.assertTrue(f16["configured"])
        self.assertEqual(f16["bytes_at_context"], f16["bytes_per_token"] * info["context_size"])
        self.assertAlmostEqual(plan["total_bytes"], plan["weights_bytes"] + f16["bytes_at_context"] + plan["per_sequence_bytes"])
        self.assertIn("fits", plan)

    def test_search_is_proxied_to_the_hub(self):
        status, found = self.api("GET", "/v1/hub/search?q=TINY-code&limit=5")
        self.assertEqual(status, 200, found)
        self.assertEqual([m["id"] for m in found["data"]], [REPO])
        self.assertEqual(found["data"][0]["pipeline_tag"], "text-generation")
        self.assertGreater(found["data"][0]["downloads"], 0)
        logged = self.hub.requests("hub", "GET", "/api/models?")
        self.assertTrue(any("search=TINY-code" in r[2] and "limit=5" in r[2] for r in logged), logged)
        status, found = self.api("GET", "/v1/hub/search?q=sluice-test")
        self.assertEqual(sorted(m["id"] for m in found["data"]), ["sluice-test/gated-qwen2", REPO])
        self.assertTrue([m for m in found["data"] if m["id"] == "sluice-test/gated-qwen2"][0]["gated"])

    def test_search_refuses_bad_parameters(self):
        for query, param in [("", "q"), ("?q=", "q"), ("?q=" + "x" * 201, "q"), ("?q=a&limit=0", "limit"),
                             ("?q=a&limit=51", "limit"), ("?q=a&limit=ten", "limit")]:
            status, err = self.api("GET", "/v1/hub/search" + query)
            self.assertEqual(status, 400, query)
            self.assertEqual(err["error"]["param"], param, query)

    def test_download_reports_progress_and_fills_the_cache(self):
        self.hub.slow["model-00001-of-00002.safetensors"] = 0.01  # progress has steps to watch
        try:
            status, job = self.api("POST", "/v1/hub/downloads", {"model": REPO})
            self.assertEqual(status, 202, job)
            self.assertEqual(job["object"], "hub.download")
            status, again = self.api("POST", "/v1/hub/downloads", {"model": REPO})
            self.assertEqual((status, again["id"]), (200, job["id"]))  # the same download, not a second one
            done, seen = self.wait_download(job["id"])
        finally:
            self.hub.slow.clear()
        self.assertEqual(done["phase"], "done", done)
        self.assertEqual(done["files_done"], done["files_total"])
        self.assertEqual(done["bytes_done"], done["bytes_total"])
        self.assertEqual(done["percent"], 100)
        progress = [j["bytes_done"] for j in seen if j["phase"] == "downloading"]
        self.assertTrue(any(0 < b < done["bytes_total"] for b in progress), progress)
        self.assertEqual(progress, sorted(progress))
        snapshot = done["snapshot_dir"]
        self.assertTrue(snapshot.startswith(os.path.join(self.cache, "models--sluice-test--tiny-code-qwen2", "snapshots")))
        self.assertTrue(os.path.islink(os.path.join(snapshot, "config.json")))
        status, listed = self.api("GET", "/v1/hub/downloads")
        self.assertIn(job["id"], [j["id"] for j in listed["data"]])

        status, cache = self.api("GET", "/v1/hub/models")
        self.assertEqual(status, 200)
        self.assertEqual(cache["cache_dir"], self.cache)
        model = [m for m in cache["data"] if m["id"] == REPO][0]
        self.assertTrue(model["complete"])
        self.assertEqual(model["snapshot_dir"], snapshot)
        self.assertGreater(model["disk_bytes"], 18e6)
        self.assertGreater(model["needed_bytes"], model["weights_bytes"])
        self.assertTrue(model["fits"])  # 19 MB of weights on any test machine
        self.assertFalse(model["served"])

    def test_download_of_a_gated_repo_fails_with_the_reason(self):
        status, job = self.api("POST", "/v1/hub/downloads", {"model": "sluice-test/gated-qwen2"})
        self.assertEqual(status, 202)
        done, _ = self.wait_download(job["id"])
        self.assertEqual(done["phase"], "failed")
        self.assertIn("gated", done["error"])

    def test_download_refuses_bad_requests(self):
        for body, param in [({}, "model"), ({"model": 5}, "model"), ({"model": "../etc"}, "model"),
                            ({"model": "no-slash"}, "model")]:
            status, err = self.api("POST", "/v1/hub/downloads", body)
            self.assertEqual(status, 400, body)
            self.assertEqual(err["error"]["param"], param, body)
        status, err = self.srv.request("POST", "/v1/hub/downloads", body=b"{not json", headers=AUTH)[0:2]
        self.assertEqual(status, 400)
        status, err = self.api("GET", "/v1/hub/downloads/dl-999")
        self.assertEqual(status, 404)
        self.assertEqual(err["error"]["code"], "download_not_found")

    def test_preflight_allows_the_app_from_another_origin(self):
        status, headers, _ = self.srv.request("OPTIONS", "/v1/hub/downloads", headers={
            "Origin": "http://elsewhere.test", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        self.assertEqual(status, 204)
        self.assertEqual(headers["access-control-allow-origin"], "*")
        self.assertIn("authorization", headers["access-control-allow-headers"])


def use(args):
    global ARGS
    ARGS = args


if __name__ == "__main__":
    sys.exit(run_e2e_tests(use))
