"""Starting the real `sluice serve` on a free port and talking plain HTTP to it (standard library only).
Shared by the end-to-end tests and the Node SDK test runner."""
import argparse
import http.client
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

READY = re.compile(r"sluice ready: http://([0-9.]+):(\d+) ")


class Server:
    def __init__(self, sluice, model, *extra, ready_timeout=90, preexec_fn=None):
        self.cmd = [sluice, "serve", *(["--model", model] if model else []), "--port", "0", "--threads", "2", *extra]
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     errors="replace", preexec_fn=preexec_fn)
        self.stderr_lines = []
        self._readers = [threading.Thread(target=self._drain, args=(self.proc.stderr, self.stderr_lines), daemon=True)]
        lines = self.stdout_lines = queue.Queue()  # stdout after the ready line stays here for a test to read
        self._readers.append(threading.Thread(target=self._lines, args=(self.proc.stdout, lines), daemon=True))
        for t in self._readers:
            t.start()
        deadline = time.time() + ready_timeout
        self.host = self.port = None
        while time.time() < deadline:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if line is None:
                break
            m = READY.search(line)
            if m:
                self.host, self.port = m.group(1), int(m.group(2))
                self.ready_line = line
                return
        self.kill()
        raise RuntimeError("server did not become ready: %s\n%s" % (" ".join(self.cmd), "".join(self.stderr_lines)))

    @staticmethod
    def _drain(stream, sink):
        for line in stream:
            sink.append(line)

    @staticmethod
    def _lines(stream, q):
        for line in stream:
            q.put(line)
        q.put(None)

    @property
    def base_url(self):
        return "http://%s:%d" % (self.host, self.port)

    def connection(self, timeout=60):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """Returns (status, headers dict (lower-case names), body bytes)."""
        conn = self.connection(timeout)
        try:
            hdrs = dict(headers or {})
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
                hdrs.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=body, headers=hdrs)
            res = conn.getresponse()
            data = res.read()
            return res.status, {k.lower(): v for k, v in res.getheaders()}, data
        finally:
            conn.close()

    def json(self, method, path, body=None, headers=None, timeout=60):
        status, hdrs, data = self.request(method, path, body, headers, timeout)
        return status, json.loads(data) if data else None

    def stream(self, path, body, timeout=60, headers=None):
        """POSTs and yields each SSE data payload (str) as it arrives."""
        conn = self.connection(timeout)
        try:
            conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})})
            res = conn.getresponse()
            if res.status != 200:
                raise AssertionError("stream status %d: %s" % (res.status, res.read()))
            assert res.getheader("Content-Type", "").startswith("text/event-stream")
            buf = b""
            while True:
                chunk = res.read1(65536) if hasattr(res, "read1") else res.read(1)
                if not chunk:
                    break
                buf += chunk
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    for line in event.decode().split("\n"):
                        assert line.startswith("data: "), line
                        yield line[6:]
        finally:
            conn.close()

    def metric(self, name):
        status, _, data = self.request("GET", "/metrics")
        for line in data.decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        finally:
            self._close_pipes()

    def _close_pipes(self):
        for t in self._readers:
            t.join(timeout=5)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe:
                pipe.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self._close_pipes()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_e2e_tests(use_args):
    """The end-to-end scripts' main: --sluice and --model, exit 77 (skipped) when either is missing, the
    calling script's unittest cases otherwise (0 when they pass, 1 when not)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--model", required=True)
    args, rest = ap.parse_known_args()
    if not os.access(args.sluice, os.X_OK):
        print("SKIP: %s not built" % args.sluice)
        return 77
    if not os.path.exists(os.path.join(args.model, "config.json")):
        print("SKIP: model %s missing" % args.model)
        return 77
    use_args(args)
    prog = unittest.main(module="__main__", argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    return 0 if prog.result.wasSuccessful() else 1
