#!/usr/bin/env python3
"""The container recipe (deploy/container/Containerfile) built with podman from this build's binary and
plugins (`--target prebuilt`) on base images made from Debian's archive
(deploy/container/make_debian_base.sh), then run: every plugin loads and every library the binary and
plugins need is in the image, it runs as its own unprivileged user, its default command is a valid
`sluice serve` of the bundled model, it serves a chat completion, and `podman stop` (SIGTERM) lets a
stream in flight finish before the container exits 0.

Exits 77 (skipped, with the reason) where podman is missing or cannot run a container here, or no
Debian mirror is reachable for the base images. Building needs Debian's packages (the runtime
libraries), as tools/setup.sh does."""
import argparse
import http.client
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from sluice_server_harness import free_port  # noqa: E402

IMAGE = "localhost/sluice-container-test:%d" % os.getpid()
ARGS = None
RUN_FLAGS = []  # what this host's podman needs to start a container (see runnable_flags)


def podman(*args, timeout=120, check=True):
    p = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError("podman %s: exit %d\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr))
    return p


def runnable_flags():
    """podman's defaults first; then what a container host that refuses to raise limits (a sandbox with
    cgroups v1 and a fixed RLIMIT_NPROC, as this project's machines) needs: runc, and limits at most the
    host's own. None where neither starts a container."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    candidates = [[], ["--runtime", "runc", "--ulimit", "nofile=%d:%d" % (nofile, nofile), "--ulimit", "nproc=4096:4096"]]
    for flags in candidates:
        if podman("run", "--rm", *flags, "docker.io/library/debian:12", "true", check=False).returncode == 0:
            return flags
    return None


def http_json(port, method, path, body=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


class Container(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # The build's own binary and plugins, as `make build` left them (static archives left out).
        cls.context = tempfile.mkdtemp(prefix="sluice-prebuilt-")
        os.makedirs(os.path.join(cls.context, "bin"))
        shutil.copy2(ARGS.sluice, os.path.join(cls.context, "bin", "sluice"))
        shutil.copytree(ARGS.plugins, os.path.join(cls.context, "lib"), ignore=shutil.ignore_patterns("static", "examples"))
        # chroot isolation: the RUN steps need no OCI runtime (which a sandboxed host may refuse).
        p = subprocess.run(["podman", "build", "--isolation", "chroot", "-f", os.path.join(ROOT, "deploy", "container", "Containerfile"),
                            "--target", "prebuilt", "--build-context", "sluice-build=" + cls.context,
                            "-t", IMAGE, ROOT], capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            raise AssertionError("podman build failed:\n" + p.stdout[-4000:] + p.stderr[-4000:])

    @classmethod
    def tearDownClass(cls):
        podman("rmi", "-f", IMAGE, check=False)
        shutil.rmtree(cls.context, ignore_errors=True)

    def run_in_image(self, *args, entrypoint=None, timeout=120):
        extra = ["--entrypoint", entrypoint] if entrypoint else []
        return podman("run", "--rm", *RUN_FLAGS, "--network", "host", *extra, IMAGE, *args, timeout=timeout)

    def test_every_plugin_loads_with_the_images_libraries(self):
        out = self.run_in_image("plugins").stdout
        loaded = {tuple(line.split("\t")[:2]) for line in out.splitlines() if "\tloaded\t" in line}
        for plugin in [("backend", "cpu"), ("backend", "opencl"), ("expertstore", "uring"), ("kvcodec", "q8"), ("kvcodec", "turbo3")]:
            self.assertIn(plugin, loaded, out)
        missing = self.run_in_image("-c", "ldd /opt/sluice/bin/sluice /opt/sluice/lib/*.so | grep 'not found' || true", entrypoint="sh").stdout
        self.assertEqual(missing.strip(), "", "libraries the image lacks")
        devices = self.run_in_image("devices").stdout
        self.assertIn("cpu", devices)
        self.assertIn("opencl", devices, "PoCL (Debian's pocl-opencl-icd) should give the OpenCL backend a device")

    def test_runs_as_its_own_unprivileged_user(self):
        out = self.run_in_image("-c", "id -u; echo $XDG_CACHE_HOME; test -w $XDG_CACHE_HOME && echo writable", entrypoint="sh").stdout.split()
        self.assertEqual(out[0], "10001")
        self.assertEqual(out[1], "/var/lib/sluice/cache")
        self.assertEqual(out[2], "writable")  # hub downloads land there

    def test_the_default_command_serves_the_bundled_model(self):
        cmd = json.loads(podman("image", "inspect", "--format", "{{json .Config.Cmd}}", IMAGE).stdout)
        self.assertEqual(cmd[0], "serve")
        p = self.run_in_image(*cmd, "--info")  # the same options, planned and not served
        self.assertIn("weights", p.stdout)

    def test_serves_then_drains_a_stream_on_stop(self):
        port = free_port()
        name = "sluice-container-test-%d-%d" % (os.getpid(), port)
        podman("run", "-d", *RUN_FLAGS, "--network", "host", "--name", name, IMAGE, "serve", "--host", "127.0.0.1", "--port", str(port),
               "--model", "/opt/sluice/models/tiny-code-qwen2", "--threads", "1", "--ctx-size", "4096", "--shutdown-grace", "60")
        try:
            deadline = time.time() + 120
            while time.time() < deadline:
                try:
                    if http_json(port, "GET", "/health", timeout=2)[0] == 200:
                        break
                except OSError:
                    pass
                time.sleep(0.5)
            else:
                self.fail("not healthy in 120 s:\n" + podman("logs", name, check=False).stderr[-3000:])
            status, data = http_json(port, "POST", "/v1/chat/completions",
                                     {"messages": [{"role": "user", "content": "def add(a, b):"}], "max_tokens": 8})
            self.assertEqual(status, 200, data)
            self.assertTrue(json.loads(data)["choices"][0]["message"]["content"])

            # A long stream, then SIGTERM while it runs: it must finish whole, and the container exit 0.
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            conn.request("POST", "/v1/completions", body=json.dumps({"prompt": "def main():", "max_tokens": 3000, "stream": True,
                                                                     "ignore_eos": True}),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            self.assertEqual(r.status, 200)
            first = r.readline()
            while first.strip() == b"":
                first = r.readline()
            self.assertTrue(first.startswith(b"data: "), first)
            stopper = threading.Thread(target=podman, args=("stop", "-t", "90", name), kwargs={"timeout": 150, "check": False})
            stopper.start()
            body = r.read()
            conn.close()
            stopper.join()
            self.assertIn(b"data: [DONE]", body, "the stream in flight was cut")
            self.assertIn(b'"finish_reason":"length"', body.replace(b" ", b""))
            logs = podman("logs", name, check=False)
            self.assertIn("1 in flight", logs.stdout + logs.stderr, "SIGTERM came after the stream ended: nothing was drained")
            code = podman("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
            self.assertEqual(code, "0", logs.stderr[-3000:])
        finally:
            podman("rm", "-f", name, check=False)


def main():
    global ARGS, RUN_FLAGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--plugins", required=True, help="the build's plugin folder (build/lib)")
    ARGS, rest = ap.parse_known_args()
    if shutil.which("podman") is None:
        print("SKIP: podman is not installed (tools/setup.sh installs it)")
        return 77
    base = subprocess.run(["bash", os.path.join(ROOT, "deploy", "container", "make_debian_base.sh")], capture_output=True, text=True,
                          timeout=900)
    if base.returncode != 0:
        print("SKIP: no Debian base image, and none could be made from Debian's archive:\n" + base.stderr[-2000:])
        return 77
    flags = runnable_flags()
    if flags is None:
        print("SKIP: podman cannot start a container on this host: " +
              podman("run", "--rm", "docker.io/library/debian:12", "true", check=False).stderr.strip()[-500:])
        return 77
    RUN_FLAGS = flags
    prog = unittest.main(module="__main__", argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
