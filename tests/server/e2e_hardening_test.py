#!/usr/bin/env python3
"""End-to-end hardening tests of `sluice serve` (issue 23) against the real binary and bundled model:
/health stays fast while expensive requests run, accept failures back off when descriptors run out,
responses are valid UTF-8 whatever the request held, HTTP/1.0 streams are not chunked, 431 and 414 for
oversized headers and targets, wrongly typed flags are 400, the work queue answers 503 when full.
Exit 77 (ctest SKIP_RETURN_CODE) when the binary or model is missing."""
import json
import os
import resource
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server_harness import Server, run_e2e_tests  # noqa: E402

ARGS = None


def start(*extra, **kwargs):
    return Server(ARGS.sluice, ARGS.model, *extra, **kwargs)


def raw_exchange(srv, request, timeout=30):
    """Sends raw bytes and reads until the server closes; returns (head str, body bytes)."""
    with socket.create_connection((srv.host, srv.port), timeout=timeout) as s:
        try:
            s.sendall(request)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before taking everything
        chunks = []
        while True:
            try:
                chunk = s.recv(1 << 20)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    return head.decode("latin-1"), body


def post_bytes(path, body):
    return (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(body), body))


def strict_json(data):
    """The body as JSON, decoded as strict UTF-8 (what a client's JSON parser requires)."""
    return json.loads(data.decode("utf-8", errors="strict"))


class HealthUnderLoad(unittest.TestCase):
    """Requests that parse, render and tokenize megabytes run off the I/O threads: /health stays fast."""

    def test_health_is_not_queued_behind_heavy_requests(self):
        srv = start()
        try:
            text = "def f(x):\n    return x * 2  # " * 30000  # ~1 MB of code: parse, render, tokenize
            heavy = [("/tokenize", {"content": text}),
                     ("/v1/completions", {"prompt": text, "max_tokens": 1}),  # 400 once tokenized: too long
                     ("/apply-template", {"messages": [{"role": "user", "content": text}]}),
                     ("/v1/chat/completions", {"messages": [{"role": "user", "content": text}], "max_tokens": 1})]
            bodies = [(path, json.dumps(body).encode()) for path, body in heavy]
            probing = threading.Event()
            done = threading.Event()
            in_flight = {"n": 0}
            lock = threading.Lock()

            def client(path, body):  # keeps one heavy request in flight until the probes are done
                while not done.is_set():
                    with lock:
                        in_flight["n"] += 1
                    probing.set()
                    try:
                        raw_exchange(srv, post_bytes(path, body), timeout=120)
                    finally:
                        with lock:
                            in_flight["n"] -= 1

            threads = [threading.Thread(target=client, args=pb) for pb in bodies]
            for t in threads:
                t.start()
            probing.wait(10)
            time.sleep(0.2)  # the first bodies are in; their work has begun
            latencies, busy_probes = [], 0
            try:
                for _ in range(50):
                    t0 = time.monotonic()
                    status, _ = srv.json("GET", "/health", timeout=30)
                    latencies.append(time.monotonic() - t0)
                    self.assertEqual(status, 200)
                    with lock:
                        busy_probes += in_flight["n"] > 0
                    time.sleep(0.01)
            finally:
                done.set()
                for t in threads:
                    t.join(120)
            self.assertGreaterEqual(busy_probes, 45, "the heavy requests did not load the server")
            latencies.sort()
            p99 = latencies[int(0.99 * (len(latencies) - 1))]
            # Behind the heavy work /health waited for it: p99 1.2 s here, 19 s in the probe. The
            # bound is loose on purpose, since ctest runs other tests beside this one; the 100 ms figure is
            # the soak test's to measure (make soak), on a machine doing nothing else.
            self.assertLess(p99, 0.5, "health p99 %.3f s; slowest %s" % (p99, latencies[-5:]))
        finally:
            srv.stop()

    def test_full_work_queue_answers_503(self):
        srv = start("--work-threads", "1", "--work-queue", "1")
        try:
            body = json.dumps({"content": "x = 1\n" * 100000}).encode()  # ~0.3 s to tokenize
            results = []

            def client():
                head, data = raw_exchange(srv, post_bytes("/tokenize", body), timeout=120)
                results.append((int(head.split(" ", 2)[1]), data))

            threads = [threading.Thread(target=client) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            statuses = sorted(r[0] for r in results)
            self.assertIn(200, statuses, statuses)
            self.assertIn(503, statuses, statuses)
            busy = strict_json(next(d for s, d in results if s == 503))
            self.assertEqual(busy["error"]["code"], "server_overloaded")
            self.assertEqual(srv.json("GET", "/health")[0], 200)
        finally:
            srv.stop()


    def test_sigterm_answers_work_running_and_queued_and_exits_0(self):
        # No grace: the queued work is cancelled at the first check after SIGTERM. (With a second of grace a
        # machine that tokenizes the four bodies in under a second finished them all and cancelled nothing.)
        srv = start("--work-threads", "1", "--work-queue", "4", "--shutdown-grace", "0")
        body = json.dumps({"content": "x = 1\n" * 200000}).encode()
        answers = []

        def client():
            head, data = raw_exchange(srv, post_bytes("/tokenize", body), timeout=60)
            answers.append((head.split("\r\n")[0], data))

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        deadline = time.time() + 20  # one job runs, the others wait in the queue
        while srv.metric("sluice_http_preparing_requests") < 4 and time.time() < deadline:
            time.sleep(0.02)
        t0 = time.time()
        self.assertEqual(srv.stop(timeout=30), 0, "".join(srv.stderr_lines[-20:]))
        self.assertLess(time.time() - t0, 10)
        for t in threads:
            t.join(30)
        self.assertEqual(len(answers), 4, answers)
        # Queued work is cancelled with an answer; the running job finishes, or is cut (no answer) if it
        # outlives the hard deadline on a slow machine.
        cancelled = 0
        for status_line, data in answers:
            if " 503 " in status_line:
                self.assertEqual(strict_json(data)["error"]["code"], "server_shutting_down")
                cancelled += 1
            elif status_line:
                self.assertIn(" 200 ", status_line)
        self.assertGreaterEqual(cancelled, 1, [a[0] for a in answers])


class AcceptBackoff(unittest.TestCase):
    """Out of descriptors, accept waits and retries instead of spinning and flooding the log."""

    LIMIT = 64

    # UndefinedBehaviorSanitizer tests whether memory is readable by writing it into a pipe, so at
    # every vptr check (each log call) it needs two free descriptors; with none left it reports a
    # false "invalid vptr" and, built with -fno-sanitize-recover, stops the server. The normal build
    # runs this test in `make test`; `make sanitize` names itself in SLUICE_SANITIZER_BUILD.
    @unittest.skipIf(os.environ.get("SLUICE_SANITIZER_BUILD") == "1",
                     "UBSan needs free descriptors for its own checks: exhaustion is tested in the normal build")
    def test_descriptor_exhaustion_backs_off_and_recovers(self):
        def low_fd_limit():
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.LIMIT, self.LIMIT))

        srv = start(preexec_fn=low_fd_limit)
        conns = []
        try:
            for _ in range(self.LIMIT + 40):  # the kernel completes handshakes the server cannot accept
                conns.append(socket.create_connection((srv.host, srv.port), timeout=10))
            time.sleep(0.5)  # the server reaches its limit
            log_before = len(srv.stderr_lines)
            cpu_before = self.cpu_seconds(srv.proc.pid)
            time.sleep(2.0)
            cpu = self.cpu_seconds(srv.proc.pid) - cpu_before
            failures = [line for line in srv.stderr_lines[log_before:] if "accept failed" in line]
            self.assertLess(cpu, 0.3, "the server used %.2f s of CPU in 2 s while out of descriptors" % cpu)
            self.assertLessEqual(len(failures), 3, failures[:5])
            reported = [line for line in srv.stderr_lines if "accept failed" in line]
            self.assertTrue(reported, "accept failures are not logged")
            self.assertRegex(reported[0], r"accept failed \d+ time")
            for c in conns:
                c.close()
            conns = []
            deadline = time.time() + 10
            status = None
            while time.time() < deadline and status != 200:
                try:
                    status = srv.json("GET", "/health", timeout=2)[0]
                except OSError:
                    time.sleep(0.1)
            self.assertEqual(status, 200, "no longer serving after the connections closed")
        finally:
            for c in conns:
                c.close()
            srv.stop()

    @staticmethod
    def cpu_seconds(pid):
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


class Protocol(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = start("--ctx-size", "256")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def assertApiError(self, head, body, status):
        self.assertTrue(head.startswith("HTTP/1.1 %d " % status), head)
        err = strict_json(body)["error"]
        for key in ("message", "type", "param", "code"):
            self.assertIn(key, err)
        return err

    # --- Responses are valid UTF-8 whatever the request held.

    def test_invalid_utf8_in_echoed_prompt_is_replaced(self):
        body = b'{"prompt":"ab\xff\xe2\x82","echo":true,"max_tokens":2,"temperature":0}'
        head, data = raw_exchange(self.srv, post_bytes("/v1/completions", body))
        self.assertIn(" 200 ", head.split("\r\n")[0])
        text = strict_json(data)["choices"][0]["text"]
        self.assertTrue(text.startswith("ab\ufffd\ufffd"), repr(text))

    def test_invalid_utf8_in_streamed_echo_and_stop_is_replaced(self):
        body = b'{"prompt":"x\xc3","echo":true,"stop":["\xff\xfe"],"max_tokens":3,"stream":true}'
        head, data = raw_exchange(self.srv, post_bytes("/v1/completions", body))
        self.assertIn(" 200 ", head.split("\r\n")[0])
        payload = data.decode("utf-8", errors="strict")  # chunk sizes are ASCII
        events = [line[6:] for line in payload.split("\n") if line.startswith("data: ")]
        self.assertEqual(events[-1], "[DONE]")
        texts = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])
        self.assertTrue(texts.startswith("x\ufffd"), repr(texts))

    def test_invalid_utf8_quoted_in_errors_and_templates_is_replaced(self):
        head, data = raw_exchange(self.srv, b"GET /v1/\xff\xfe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        self.assertIn("\ufffd", self.assertApiError(head, data, 404)["message"])
        body = b'{"messages":[{"role":"user","content":"caf\xe9"}]}'
        head, data = raw_exchange(self.srv, post_bytes("/apply-template", body))
        if " 200 " in head.split("\r\n")[0]:
            self.assertIn("caf\ufffd", strict_json(data)["prompt"])
        body = b'{"content":"caf\xe9 \xf0\x9f","with_pieces":true}'
        head, data = raw_exchange(self.srv, post_bytes("/tokenize", body))
        self.assertIn(" 200 ", head.split("\r\n")[0])
        self.assertTrue(strict_json(data)["tokens"])

    # --- HTTP/1.0 has no chunked encoding: the stream ends when the connection does.

    def test_http10_stream_is_not_chunked_and_ends_at_close(self):
        body = json.dumps({"prompt": "def f():", "max_tokens": 6, "stream": True}).encode()
        request = (b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                   % (len(body), body))
        head, data = raw_exchange(self.srv, request)
        lines = head.lower().split("\r\n")
        self.assertTrue(lines[0].startswith("http/1.0 200"), head)
        self.assertFalse(any(line.startswith("transfer-encoding") for line in lines), head)
        self.assertIn("connection: close", lines)
        self.assertTrue(data.startswith(b"data: {"), data[:40])
        self.assertTrue(data.endswith(b"data: [DONE]\n\n"), data[-40:])

    def test_http10_plain_answer_still_works(self):
        request = b"GET /health HTTP/1.0\r\n\r\n"
        head, data = raw_exchange(self.srv, request)
        self.assertTrue(head.startswith("HTTP/1.0 200"), head)
        self.assertEqual(strict_json(data)["status"], "ok")

    # --- Oversized header blocks and request targets.

    def test_oversized_header_is_431(self):
        request = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n"
        head, data = raw_exchange(self.srv, request)
        self.assertEqual(self.assertApiError(head, data, 431)["code"], "header_fields_too_large")
        self.assertEqual(self.srv.json("GET", "/health")[0], 200)

    def test_oversized_target_is_414(self):
        for length in (100000, 10000):  # over the header limit, and over the target limit alone
            request = b"GET /" + b"a" * length + b" HTTP/1.1\r\nHost: x\r\n\r\n"
            head, data = raw_exchange(self.srv, request)
            self.assertEqual(self.assertApiError(head, data, 414)["code"], "uri_too_long", length)
        self.assertEqual(self.srv.json("GET", "/health")[0], 200)

    # --- Field validation.

    def test_wrongly_typed_flags_are_400_naming_the_field(self):
        cases = [("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
                                           "add_generation_prompt": "x"}, "add_generation_prompt"),
                 ("/v1/completions", {"prompt": "x", "echo": "x", "max_tokens": 1}, "echo"),
                 ("/apply-template", {"messages": [{"role": "user", "content": "hi"}],
                                      "add_generation_prompt": "x"}, "add_generation_prompt"),
                 ("/apply-template", {"messages": [{"role": "user", "content": "hi"}], "tools": "x"}, "tools"),
                 ("/tokenize", {"content": "x", "with_pieces": "x"}, "with_pieces"),
                 ("/tokenize", {"content": "x", "add_special": 1}, "add_special")]
        for path, body, param in cases:
            status, resp = self.srv.json("POST", path, body)
            self.assertEqual(status, 400, (path, body, resp))
            self.assertEqual(resp["error"]["param"], param, (path, resp))

    def test_completion_context_length_error_names_prompt(self):
        status, resp = self.srv.json("POST", "/v1/completions", {"prompt": [1] * 300})
        self.assertEqual(status, 400, resp)
        self.assertEqual(resp["error"]["code"], "context_length_exceeded")
        self.assertEqual(resp["error"]["param"], "prompt")


def main():
    def use(args):
        global ARGS
        ARGS = args
    return run_e2e_tests(use)


if __name__ == "__main__":
    sys.exit(main())
