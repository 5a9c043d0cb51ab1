#!/usr/bin/env python3
"""End-to-end tests of `sluice serve` with the real bundled model, over plain HTTP: endpoints, streaming,
stop strings, errors and limits, auth, CORS, metrics (promtool), cancel-on-disconnect, queue-full and
graceful shutdown. Exit 77 (ctest SKIP_RETURN_CODE) when the binary or model is missing."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server_harness import Server, run_e2e_tests  # noqa: E402

ARGS = None
LONG = {"max_tokens": 1500, "ignore_eos": True, "temperature": 0.8}


def start(*extra):
    return Server(ARGS.sluice, ARGS.model, *extra)


class Endpoints(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = start()
        status, body = cls.srv.json("POST", "/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
        cls.chat_ok = status == 200
        cls.chat_reason = json.dumps(body)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def need_chat(self):
        if not self.chat_ok:
            self.skipTest("chat templates unavailable in this build: " + self.chat_reason)

    def test_ready_line_names_address_model_and_backend(self):
        self.assertIn("model=tiny-code-qwen2", self.srv.ready_line)
        self.assertIn("backend=", self.srv.ready_line)

    def test_health(self):
        status, body = self.srv.json("GET", "/health")
        self.assertEqual(status, 200)
        self.assertEqual(body["status"], "ok")
        self.assertEqual(body["model"], "tiny-code-qwen2")
        self.assertIn("memory", body)
        self.assertTrue(body["devices"])
        self.assertEqual(body["memory"]["kv_recent_window"], 0)  # f16: nothing to keep exact
        self.assertEqual(body["memory"]["kv_recent_bytes"], 0)

    def test_models(self):
        status, body = self.srv.json("GET", "/v1/models")
        self.assertEqual(status, 200)
        self.assertEqual(body["object"], "list")
        self.assertEqual(body["data"][0]["id"], "tiny-code-qwen2")

    def test_completion_from_text(self):
        status, body = self.srv.json("POST", "/v1/completions", {"prompt": "def add(a, b):", "max_tokens": 16,
                                                                   "temperature": 0})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["object"], "text_completion")
        self.assertTrue(body["id"].startswith("cmpl-"))
        choice = body["choices"][0]
        self.assertIsInstance(choice["text"], str)
        self.assertIn(choice["finish_reason"], ("stop", "length"))
        u = body["usage"]
        self.assertEqual(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"])
        self.assertGreater(u["prompt_tokens"], 0)
        self.assertIn("prompt_ms", body["timings"])
        self.assertIn("predicted_per_second", body["timings"])

    def test_completion_from_token_ids_matches_text_prompt(self):
        status, tok = self.srv.json("POST", "/tokenize", {"content": "import os\n"})
        self.assertEqual(status, 200)
        ids = tok["tokens"]
        a = self.srv.json("POST", "/v1/completions", {"prompt": "import os\n", "max_tokens": 12, "temperature": 0})[1]
        b = self.srv.json("POST", "/v1/completions", {"prompt": ids, "max_tokens": 12, "temperature": 0})[1]
        self.assertEqual(a["choices"][0]["text"], b["choices"][0]["text"])
        self.assertEqual(b["usage"]["prompt_tokens"], len(ids))

    def test_length_finish_and_max_tokens(self):
        body = self.srv.json("POST", "/v1/completions", {"prompt": "x = ", "max_tokens": 3, "ignore_eos": True})[1]
        self.assertEqual(body["usage"]["completion_tokens"], 3)
        self.assertEqual(body["choices"][0]["finish_reason"], "length")

    def test_same_seed_same_output(self):
        req = {"prompt": "class Foo:", "max_tokens": 24, "temperature": 1.0, "seed": 1234}
        a = self.srv.json("POST", "/v1/completions", req)[1]["choices"][0]["text"]
        b = self.srv.json("POST", "/v1/completions", req)[1]["choices"][0]["text"]
        self.assertEqual(a, b)

    def test_stop_string_is_never_emitted_and_cuts_where_it_starts(self):
        req = {"prompt": "def main():\n", "max_tokens": 40, "temperature": 0, "ignore_eos": True}
        full = self.srv.json("POST", "/v1/completions", req)[1]["choices"][0]["text"]
        self.assertGreater(len(full), 12, full)
        # A stop string that spans the middle of the text (most likely across a token boundary).
        start = len(full) // 2
        stop = full[start:start + 5]
        expected = full[:full.find(stop)]
        for stream in (False, True):
            r = dict(req, stop=[stop, "never-appears-xyz"])
            if stream:
                text, finish = "", None
                for data in self.srv.stream("/v1/completions", dict(r, stream=True)):
                    if data == "[DONE]":
                        break
                    ch = json.loads(data)["choices"][0]
                    text += ch["text"]
                    finish = ch["finish_reason"] or finish
            else:
                ch = self.srv.json("POST", "/v1/completions", r)[1]["choices"][0]
                text, finish = ch["text"], ch["finish_reason"]
            self.assertEqual(text, expected, "stream=%s stop=%r" % (stream, stop))
            self.assertNotIn(stop, text)
            self.assertEqual(finish, "stop")

    def test_streamed_completion_concatenates_to_the_plain_one(self):
        req = {"prompt": "for i in range(", "max_tokens": 20, "temperature": 0}
        plain = self.srv.json("POST", "/v1/completions", req)[1]["choices"][0]["text"]
        text, ids, done = "", set(), False
        for data in self.srv.stream("/v1/completions", dict(req, stream=True)):
            if data == "[DONE]":
                done = True
                break
            chunk = json.loads(data)
            ids.add(chunk["id"])
            text += chunk["choices"][0]["text"]
        self.assertTrue(done)
        self.assertEqual(len(ids), 1)
        self.assertEqual(text, plain)

    def test_logprobs(self):
        body = self.srv.json("POST", "/v1/completions", {"prompt": "x = 1", "max_tokens": 4, "logprobs": 2,
                                                          "ignore_eos": True})[1]
        lp = body["choices"][0]["logprobs"]
        self.assertEqual(len(lp["tokens"]), 4)
        self.assertEqual(len(lp["top_logprobs"][0]), 2)
        self.assertTrue(all(v <= 0 for v in lp["token_logprobs"]))

    def test_deadline_cuts_generation_short(self):
        t0 = time.time()
        body = self.srv.json("POST", "/v1/completions", dict(LONG, prompt="def f():", timeout=0.2))[1]
        self.assertLess(body["usage"]["completion_tokens"], 1500)
        self.assertEqual(body["choices"][0]["finish_reason"], "length")
        self.assertLess(time.time() - t0, 10)

    def test_chat_completion(self):
        self.need_chat()
        status, body = self.srv.json("POST", "/v1/chat/completions", {
            "model": "tiny-code-qwen2", "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "system", "content": "You write Python."},
                         {"role": "user", "content": [{"type": "text", "text": "def fib(n):"}]}]})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["object"], "chat.completion")
        self.assertTrue(body["id"].startswith("chatcmpl-"))
        msg = body["choices"][0]["message"]
        self.assertEqual(msg["role"], "assistant")
        self.assertIsInstance(msg["content"], str)
        self.assertGreater(body["usage"]["prompt_tokens"], 5)

    def test_chat_stream_role_first_then_deltas_then_usage(self):
        self.need_chat()
        events = list(self.srv.stream("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "import"}], "max_tokens": 12, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}))
        self.assertEqual(events[-1], "[DONE]")
        chunks = [json.loads(e) for e in events[:-1]]
        self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertEqual(len({c["id"] for c in chunks}), 1)
        self.assertTrue(all(c["object"] == "chat.completion.chunk" for c in chunks))
        usage = chunks[-1]
        self.assertEqual(usage["choices"], [])
        self.assertEqual(usage["usage"]["total_tokens"],
                         usage["usage"]["prompt_tokens"] + usage["usage"]["completion_tokens"])
        finals = [c for c in chunks[:-1] if c["choices"][0]["finish_reason"]]
        self.assertEqual(len(finals), 1)
        self.assertIn(finals[0]["choices"][0]["finish_reason"], ("stop", "length"))

    def test_answers_carry_the_routing_key_and_echo_the_session_id(self):
        long_prompt = "def fibonacci(n):\n    " + "# compute the nth number of the sequence\n    " * 6
        # A streamed answer: the headers go out with the stream's head.
        conn = self.srv.connection()
        try:
            conn.request("POST", "/v1/completions", body=json.dumps({"prompt": long_prompt, "max_tokens": 2, "stream": True}),
                         headers={"Content-Type": "application/json", "X-Session-Id": "conv-42"})
            res = conn.getresponse()
            streamed = res.getheader("X-Sluice-Prefix-Key")
            self.assertEqual(res.getheader("X-Session-Id"), "conv-42")
            res.read()
        finally:
            conn.close()
        self.assertRegex(streamed or "", r"^[0-9a-f]{16}$")
        # A plain one of a longer prompt with the same beginning: the same key (its first blocks).
        status, hdrs, _ = self.srv.request("POST", "/v1/completions", {"prompt": long_prompt + "return n", "max_tokens": 2})
        self.assertEqual(status, 200)
        self.assertEqual(hdrs.get("x-sluice-prefix-key"), streamed)
        self.assertNotIn("x-session-id", hdrs)
        # A prompt shorter than a block has no key; a session id that is not a header token is not echoed.
        status, hdrs, _ = self.srv.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1},
                                           headers={"X-Session-Id": "two words"})
        self.assertEqual(status, 200)
        self.assertNotIn("x-sluice-prefix-key", hdrs)
        self.assertNotIn("x-session-id", hdrs)

    def test_apply_template_tokenize_detokenize(self):
        self.need_chat()
        status, body = self.srv.json("POST", "/apply-template", {"messages": [{"role": "user", "content": "hi"}]})
        self.assertEqual(body["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
        status, tok = self.srv.json("POST", "/tokenize", {"content": "print('hé')", "with_pieces": True})
        self.assertEqual(status, 200)
        ids = [t["id"] for t in tok["tokens"]]
        status, detok = self.srv.json("POST", "/detokenize", {"tokens": ids})
        self.assertEqual(detok["content"], "print('hé')")

    def test_keep_alive_serves_several_requests_on_one_connection(self):
        conn = self.srv.connection()
        try:
            for _ in range(3):
                conn.request("GET", "/health")
                res = conn.getresponse()
                self.assertEqual(res.status, 200)
                res.read()
        finally:
            conn.close()


class Errors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = start("--body-limit", "4096", "--ctx-size", "256")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def assertError(self, status, body, code):
        self.assertEqual(status, code, body)
        err = body["error"]
        for key in ("message", "type", "param", "code"):
            self.assertIn(key, err)
        return err

    def test_malformed_json_is_400(self):
        status, _, data = self.srv.request("POST", "/v1/completions", "{oops", {"Content-Type": "application/json"})
        self.assertError(status, json.loads(data), 400)

    def test_bad_fields_are_400_with_param(self):
        for body, param in [({"prompt": "x", "n": 17}, "n"),
                            ({"prompt": "x", "temperature": "hot"}, "temperature"),
                            ({"prompt": "x", "response_format": {"type": "json_schema"}}, "response_format.json_schema"),
                            ({"prompt": "x", "response_format": {"type": "yaml"}}, "response_format"),
                            ({"prompt": [99999999]}, "prompt"),
                            ({"messages": "nope"}, "messages")]:
            path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
            status, resp = self.srv.json("POST", path, body)
            self.assertEqual(self.assertError(status, resp, 400)["param"], param)

    def test_prompt_longer_than_context_is_400(self):
        status, resp = self.srv.json("POST", "/v1/completions", {"prompt": [1] * 300})
        self.assertEqual(self.assertError(status, resp, 400)["code"], "context_length_exceeded")

    def test_unknown_path_404_and_wrong_method_405(self):
        status, resp = self.srv.json("GET", "/v1/nothing")
        self.assertError(status, resp, 404)
        status, resp = self.srv.json("GET", "/v1/completions")
        self.assertError(status, resp, 405)
        status, resp = self.srv.json("DELETE", "/health")
        self.assertError(status, resp, 405)

    def test_body_over_the_limit_is_413(self):
        status, _, data = self.srv.request("POST", "/v1/completions", "x" * 10000, {"Content-Type": "application/json"})
        self.assertError(status, json.loads(data), 413)
        status, _ = self.srv.json("GET", "/health")  # still serving
        self.assertEqual(status, 200)

    def test_garbage_http_does_not_crash(self):
        with socket.create_connection((self.srv.host, self.srv.port), timeout=10) as s:
            s.sendall(b"\x00\x01garbage that is not http\r\n\r\n")
            s.recv(4096)
        self.assertEqual(self.srv.json("GET", "/health")[0], 200)


class AuthAndCors(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = start("--api-key", "sekrit", "--cors", "http://app.example")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_key_required_except_health_and_metrics(self):
        status, body = self.srv.json("GET", "/v1/models")
        self.assertEqual(status, 401)
        self.assertIn("error", body)
        self.assertEqual(self.srv.json("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0], 401)
        self.assertEqual(self.srv.json("GET", "/v1/models", headers={"Authorization": "Bearer sekrit"})[0], 200)
        self.assertEqual(self.srv.request("GET", "/health")[0], 200)
        self.assertEqual(self.srv.request("GET", "/metrics")[0], 200)

    def test_cors_preflight_and_simple_request(self):
        status, hdrs, _ = self.srv.request("OPTIONS", "/v1/chat/completions", headers={
            "Origin": "http://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type"})
        self.assertEqual(status, 204)
        self.assertEqual(hdrs["access-control-allow-origin"], "http://app.example")
        self.assertIn("POST", hdrs["access-control-allow-methods"])
        self.assertIn("authorization", hdrs["access-control-allow-headers"])
        status, hdrs, _ = self.srv.request("GET", "/health", headers={"Origin": "http://app.example"})
        self.assertEqual(hdrs.get("access-control-allow-origin"), "http://app.example")
        status, hdrs, _ = self.srv.request("GET", "/health", headers={"Origin": "http://evil.example"})
        self.assertNotIn("access-control-allow-origin", hdrs)


class MetricsAndCancel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = start()

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_metrics_pass_promtool(self):
        self.srv.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
        status, hdrs, data = self.srv.request("GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertTrue(hdrs["content-type"].startswith("text/plain"))
        text = data.decode()
        for name in ("sluice_requests_total", "sluice_completion_tokens_total", "sluice_queue_depth",
                     "sluice_decode_tokens_per_second", "sluice_weight_bytes", "sluice_http_requests_total"):
            self.assertIn(name, text)
        if not shutil.which("promtool"):
            self.skipTest("promtool not installed (Debian package prometheus)")
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def wait_for_metric(self, name, at_least, timeout=10):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = self.srv.metric(name)
            if v is not None and v >= at_least:
                return v
            time.sleep(0.05)
        self.fail("%s did not reach %s (now %s)" % (name, at_least, self.srv.metric(name)))

    def wait_idle(self):
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.srv.metric("sluice_http_active_generations") == 0:
                return
            time.sleep(0.05)
        self.fail("generation still active after the client left")

    def test_disconnect_during_stream_cancels_generation(self):
        before = self.srv.metric("sluice_disconnect_cancels_total")
        completion_before = self.srv.metric("sluice_completion_tokens_total")
        s = socket.create_connection((self.srv.host, self.srv.port), timeout=30)
        body = json.dumps(dict(LONG, prompt="def main():", stream=True, max_tokens=2000)).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        received = b""
        while b"data: " not in received:  # the headers may come in a packet of their own
            chunk = s.recv(4096)
            self.assertTrue(chunk, "connection closed before the first event")
            received += chunk
        s.close()
        self.wait_for_metric("sluice_disconnect_cancels_total", before + 1)
        self.wait_idle()
        produced = self.srv.metric("sluice_completion_tokens_total") - completion_before
        self.assertLess(produced, 2000)

    def test_disconnect_while_waiting_for_plain_answer_cancels_generation(self):
        before = self.srv.metric("sluice_disconnect_cancels_total")
        s = socket.create_connection((self.srv.host, self.srv.port), timeout=30)
        body = json.dumps(dict(LONG, prompt="import sys", max_tokens=2000)).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(0.1)
        s.close()
        # The generation (2000 tokens, several seconds) must not run on after the client left.
        self.wait_for_metric("sluice_disconnect_cancels_total", before + 1)
        self.wait_idle()


class QueueFull(unittest.TestCase):
    def test_full_queue_answers_503(self):
        srv = start("--parallel", "1", "--queue-size", "1")
        try:
            results = []

            def worker():
                try:
                    results.append(srv.json("POST", "/v1/completions", dict(LONG, prompt="x", timeout=5), timeout=60))
                except Exception as e:  # noqa: BLE001
                    results.append((0, str(e)))

            threads = [threading.Thread(target=worker) for _ in range(5)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            statuses = sorted(r[0] for r in results)
            self.assertIn(503, statuses, results)
            self.assertIn(200, statuses, results)
            busy = next(r[1] for r in results if r[0] == 503)
            self.assertEqual(busy["error"]["code"], "server_overloaded")
        finally:
            self.assertEqual(srv.stop(), 0)


class Lifecycle(unittest.TestCase):
    def test_sigterm_ends_in_flight_stream_and_exits_0(self):
        srv = start("--shutdown-grace", "1")
        got = {"done": False, "chunks": 0}

        def reader():
            try:
                for data in srv.stream("/v1/completions", dict(LONG, prompt="def f():", stream=True, max_tokens=4000)):
                    got["chunks"] += 1
                    if data == "[DONE]":
                        got["done"] = True
            except Exception as e:  # noqa: BLE001
                got["error"] = str(e)

        t = threading.Thread(target=reader)
        t.start()
        deadline = time.time() + 20
        while got["chunks"] < 2 and time.time() < deadline:
            time.sleep(0.02)
        t0 = time.time()
        code = srv.stop(signal.SIGTERM, timeout=20)
        t.join(20)
        self.assertEqual(code, 0, "".join(srv.stderr_lines))
        self.assertLess(time.time() - t0, 10)
        self.assertTrue(got["done"], got)
        with self.assertRaises(OSError):
            socket.create_connection((srv.host, srv.port), timeout=2).close()

    def test_drain_refuses_new_work_finishes_the_stream_in_flight_and_exits_0(self):
        key = {"Authorization": "Bearer sekrit"}
        srv = start("--api-key", "sekrit", "--shutdown-grace", "60")
        got = {"done": False, "chunks": 0, "finish": None}

        def reader():
            try:
                body = {"prompt": "def f():", "stream": True, "max_tokens": 60, "ignore_eos": True, "temperature": 0}
                for data in srv.stream("/v1/completions", body, headers=key):
                    got["chunks"] += 1
                    if data == "[DONE]":
                        got["done"] = True
                    else:
                        got["finish"] = json.loads(data)["choices"][0]["finish_reason"] or got["finish"]
            except Exception as e:  # noqa: BLE001
                got["error"] = str(e)

        t = threading.Thread(target=reader)
        t.start()
        deadline = time.time() + 20
        while got["chunks"] < 2 and time.time() < deadline:
            time.sleep(0.02)
        try:
            self.assertEqual(srv.json("POST", "/admin/drain")[0], 401)  # the key is needed
            status, body = srv.json("POST", "/admin/drain", headers=key)
            self.assertEqual(status, 202, body)
            self.assertEqual(body["status"], "draining")
            status, health = srv.json("GET", "/health")
            self.assertEqual(status, 503, health)  # a balancer's check sends new work elsewhere
            self.assertEqual(health["status"], "draining")
            status, err = srv.json("POST", "/v1/completions", {"prompt": "x", "max_tokens": 2}, headers=key)
            self.assertEqual(status, 503, err)
            self.assertEqual(err["error"]["code"], "draining")
        finally:
            t.join(60)
        # The stream in flight ran to its length, not cancelled; then the server stopped by itself.
        self.assertTrue(got["done"], got)
        self.assertEqual(got["finish"], "length", got)
        self.assertEqual(srv.proc.wait(timeout=30), 0, "".join(srv.stderr_lines))
        srv.stop(timeout=5)

    def test_drain_without_an_api_key_is_refused(self):
        srv = start()
        try:
            status, err = srv.json("POST", "/admin/drain")
            self.assertEqual(status, 403, err)
            self.assertEqual(err["error"]["code"], "drain_needs_api_key")
            status, health = srv.json("GET", "/health")
            self.assertEqual(status, 200)
            self.assertIn("free", health["slots"])
        finally:
            srv.stop(timeout=15)

    def test_sigint_on_idle_server_exits_0(self):
        srv = start()
        self.assertEqual(srv.json("GET", "/health")[0], 200)
        self.assertEqual(srv.stop(signal.SIGINT, timeout=15), 0)

    def test_turbo_kv_keeps_a_recent_window_and_serves(self):
        srv = start("--turbo-kv")
        try:
            status, body = srv.json("GET", "/health")
            self.assertEqual(status, 200)
            self.assertEqual(body["kv_codec"], "k=turbo4,v=turbo3")
            self.assertEqual(body["memory"]["kv_recent_window"], 16)
            self.assertGreater(body["memory"]["kv_recent_bytes"], 0)
            status, out = srv.json("POST", "/v1/completions", {"prompt": "def add(a, b):", "max_tokens": 8,
                                                              "temperature": 0, "ignore_eos": True})
            self.assertEqual(status, 200, out)
            self.assertEqual(out["usage"]["completion_tokens"], 8)
            status, hdrs, text = srv.request("GET", "/metrics")
            self.assertIn("sluice_kv_recent_window_tokens 16", text.decode())
        finally:
            srv.stop(signal.SIGTERM, timeout=15)

    def test_speculative_decoding_flags_serve_the_same_greedy_text_and_count_guesses(self):
        body = {"prompt": "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n\ndef fib",
                "max_tokens": 48, "temperature": 0, "ignore_eos": True}
        texts = []
        for extra in ((), ("--draft", "ngram"), ("--draft-model", ARGS.model, "--num-draft-tokens", "4")):
            srv = start(*extra)
            try:
                status, out = srv.json("POST", "/v1/completions", body)
                self.assertEqual(status, 200, out)
                texts.append(out["choices"][0]["text"])
                drafted = srv.metric("sluice_spec_draft_tokens_total")
                if extra:
                    self.assertGreater(drafted, 0, extra)
                    self.assertGreater(srv.metric("sluice_tokens_per_target_pass"), 1.0, extra)
                    self.assertGreater(srv.metric("sluice_spec_acceptance_rate"), 0.0, extra)
                else:
                    self.assertEqual(drafted, 0)
            finally:
                srv.stop(signal.SIGTERM, timeout=15)
        self.assertEqual(texts[1], texts[0])
        self.assertEqual(texts[2], texts[0])

    def test_info_counts_a_draft_model_in_the_plan(self):
        p = subprocess.run([ARGS.sluice, "serve", "--model", ARGS.model, "--info", "--ctx-size", "1024", "--draft-model", ARGS.model],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("draft model", p.stdout)

    def test_swiftlm_flags_for_missing_features_are_refused_by_name(self):
        for flag, feature in (("--dflash", "DFlash"), ("--vision", "image input"), ("--audio", "audio input")):
            p = subprocess.run([ARGS.sluice, "serve", "--model", ARGS.model, flag], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(flag, p.stderr)
            self.assertIn(feature, p.stderr)

    def test_info_prints_memory_plan_and_exits(self):
        p = subprocess.run([ARGS.sluice, "serve", "--model", ARGS.model, "--info", "--ctx-size", "1024"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("weights", p.stdout)
        self.assertIn("f16", p.stdout)
        self.assertIn("1024", p.stdout)

    def test_unknown_backend_is_refused_plainly(self):
        p = subprocess.run([ARGS.sluice, "serve", "--model", ARGS.model, "--backend", "warp-drive"],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("unknown backend 'warp-drive'", p.stderr)

    def test_missing_model_is_a_usage_error(self):
        p = subprocess.run([ARGS.sluice, "serve"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--model", p.stderr)

    def test_config_file_is_read_and_the_command_line_wins(self):
        import tempfile
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
            f.write("model = %s\nport = 1\napi-key = fromconfig\n" % ARGS.model)
            path = f.name
        try:
            # The model and key come from the file; --port 0 on the command line beats its port = 1.
            cmd_srv = Server(ARGS.sluice, None, "--config", path)
            try:
                self.assertEqual(cmd_srv.json("GET", "/v1/models")[0], 401)
                self.assertEqual(cmd_srv.json("GET", "/v1/models", headers={"Authorization": "Bearer fromconfig"})[0],
                                 200)
            finally:
                self.assertEqual(cmd_srv.stop(), 0)
        finally:
            os.unlink(path)


def main():
    def use(args):
        global ARGS
        ARGS = args
    return run_e2e_tests(use)


if __name__ == "__main__":
    sys.exit(main())
