#!/usr/bin/env python3
"""End-to-end tests of `n` choices and `logit_bias` against `sluice serve` with the bundled model: n choices
with their indices, one prefill for all (the server's counters), seeded reproducibility, streamed chunks
per choice, usage, a constraint per choice, cancel on disconnect; logit_bias banning and forcing tokens;
validation. Exit 77 (ctest SKIP_RETURN_CODE) when the binary or model is missing."""
import json
import os
import socket
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server_harness import Server, run_e2e_tests  # noqa: E402

ARGS = None
CODE = "def fibonacci(n):\n    "


class Choices(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server(ARGS.sluice, ARGS.model, "--parallel", "4")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def complete(self, body, path="/v1/completions"):
        status, resp = self.srv.json("POST", path, body)
        self.assertEqual(status, 200, resp)
        return resp

    def token_id(self, text):
        status, resp = self.srv.json("POST", "/tokenize", {"content": text})
        self.assertEqual(status, 200, resp)
        self.assertEqual(len(resp["tokens"]), 1, "%r is not one token: %s" % (text, resp))
        return resp["tokens"][0]

    def test_greedy_choices_are_identical_indexed_and_counted_once_for_the_prompt(self):
        single = self.complete({"prompt": CODE + "# one", "max_tokens": 12, "temperature": 0, "ignore_eos": True})
        prefilled = self.srv.metric("sluice_prefilled_tokens_total")
        forked = self.srv.metric("sluice_forked_sequences_total")
        resp = self.complete({"prompt": CODE + "# one", "max_tokens": 12, "temperature": 0, "ignore_eos": True, "n": 3})
        self.assertEqual([c["index"] for c in resp["choices"]], [0, 1, 2])
        for c in resp["choices"]:
            self.assertEqual(c["text"], single["choices"][0]["text"])
            self.assertEqual(c["finish_reason"], "length")
        usage = resp["usage"]
        self.assertEqual(usage["prompt_tokens"], single["usage"]["prompt_tokens"])
        self.assertEqual(usage["completion_tokens"], 3 * 12)
        self.assertEqual(usage["total_tokens"], usage["prompt_tokens"] + 36)
        # One prefill: the prompt less what the prefix cache held (the single request's blocks), once;
        # the two other choices forked from it.
        ran = self.srv.metric("sluice_prefilled_tokens_total") - prefilled
        self.assertEqual(ran, usage["prompt_tokens"] - usage["prompt_tokens_details"]["cached_tokens"])
        self.assertEqual(self.srv.metric("sluice_forked_sequences_total") - forked, 2)

    def test_seeded_choices_differ_and_are_reproduced(self):
        body = {"messages": [{"role": "user", "content": "Write a haiku about rivers."}], "max_tokens": 16,
                "temperature": 1.2, "seed": 77, "n": 4}
        first = self.complete(body, "/v1/chat/completions")
        again = self.complete(body, "/v1/chat/completions")
        texts = [c["message"]["content"] for c in first["choices"]]
        self.assertEqual(texts, [c["message"]["content"] for c in again["choices"]])
        self.assertGreaterEqual(len(set(texts)), 2, texts)
        one = self.complete(dict(body, n=1), "/v1/chat/completions")
        self.assertEqual(one["choices"][0]["message"]["content"], texts[0])

    def test_streamed_choices_carry_their_index_finish_alone_and_match_the_plain_answer(self):
        body = {"prompt": CODE, "max_tokens": 10, "temperature": 0.9, "seed": 5, "n": 3, "logprobs": 1}
        plain = self.complete(body)
        texts, finishes, usage, logprob_tokens = {}, {}, [], {}
        events = list(self.srv.stream("/v1/completions", dict(body, stream=True, stream_options={"include_usage": True})))
        self.assertEqual(events[-1], "[DONE]")
        for data in events[:-1]:
            chunk = json.loads(data)
            if not chunk["choices"]:
                usage.append(chunk["usage"])
                continue
            c = chunk["choices"][0]
            i = c["index"]
            self.assertNotIn(i, finishes, "a chunk of choice %d after its finish" % i)
            texts[i] = texts.get(i, "") + c["text"]
            if c["logprobs"]:
                logprob_tokens[i] = logprob_tokens.get(i, 0) + len(c["logprobs"]["tokens"])
            if c["finish_reason"]:
                finishes[i] = c["finish_reason"]
        self.assertEqual(sorted(texts), [0, 1, 2])
        for c in plain["choices"]:
            self.assertEqual(texts[c["index"]], c["text"])
            self.assertEqual(finishes[c["index"]], c["finish_reason"])
            self.assertEqual(logprob_tokens[c["index"]], len(c["logprobs"]["tokens"]))
        self.assertEqual(len(usage), 1)
        self.assertEqual(usage[0]["completion_tokens"], plain["usage"]["completion_tokens"])

    def test_each_choice_follows_the_response_format(self):
        schema = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer"}},
                  "required": ["colour", "n"], "additionalProperties": False}
        resp = self.complete({"messages": [{"role": "user", "content": "Pick a colour and a number."}],
                              "response_format": {"type": "json_schema", "json_schema": {"name": "pick", "schema": schema}},
                              "max_tokens": 40, "temperature": 1.0, "seed": 3, "n": 3}, "/v1/chat/completions")
        self.assertEqual(len(resp["choices"]), 3)
        for c in resp["choices"]:
            value = json.loads(c["message"]["content"])
            self.assertIn(value["colour"], ["red", "green", "blue"])
            self.assertIsInstance(value["n"], int)
            self.assertEqual(set(value), {"colour", "n"})

    def test_disconnect_cancels_every_choice(self):
        s = socket.create_connection((self.srv.host, self.srv.port), timeout=30)
        body = json.dumps({"prompt": CODE, "max_tokens": 1500, "ignore_eos": True, "temperature": 0.8, "n": 4,
                           "stream": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        received = b""
        while received.count(b"data: ") < 8:
            chunk = s.recv(4096)
            self.assertTrue(chunk, "connection closed early")
            received += chunk
        s.close()
        deadline = time.time() + 15
        while time.time() < deadline:
            if self.srv.metric("sluice_active_sequences") == 0 and self.srv.metric("sluice_kv_pages_in_use") == 0:
                break
            time.sleep(0.05)
        self.assertEqual(self.srv.metric("sluice_active_sequences"), 0)
        self.assertEqual(self.srv.metric("sluice_kv_pages_in_use"), 0)

    def test_logit_bias_bans_the_greedy_token_and_forces_another(self):
        body = {"prompt": CODE, "max_tokens": 6, "temperature": 0, "logprobs": 1}
        plain = self.complete(body)
        first = plain["choices"][0]["logprobs"]["tokens"][0]
        banned = self.token_id(first)
        without = self.complete(dict(body, logit_bias={str(banned): -100}))
        self.assertNotEqual(without["choices"][0]["logprobs"]["tokens"][0], first)
        self.assertNotIn(first, without["choices"][0]["logprobs"]["tokens"])
        forced_id = self.token_id("print")
        forced = self.complete(dict(body, logit_bias={str(forced_id): 100}))
        self.assertEqual(forced["choices"][0]["text"], "print" * 6)
        # The same through chat, streamed.
        text = ""
        for data in self.srv.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                            "max_tokens": 3, "temperature": 0, "stream": True,
                                                            "logit_bias": {str(forced_id): 100}}):
            if data != "[DONE]":
                for c in json.loads(data)["choices"]:
                    text += c["delta"].get("content") or ""
        self.assertEqual(text, "print" * 3)

    def test_logit_bias_never_overrides_the_response_format(self):
        # +100 on a token the grammar forbids outside strings, -100 on the token that opens the object:
        # the grammar still decides (the object opens, the answer parses — max_tokens never cuts a
        # constrained value), and the forced token comes wherever the grammar allows it (in a key).
        forced = self.token_id("print")
        brace = self.token_id("{")
        resp = self.complete({"messages": [{"role": "user", "content": "Give me a JSON object."}],
                              "response_format": {"type": "json_object"}, "max_tokens": 30, "temperature": 0,
                              "logit_bias": {str(forced): 100, str(brace): -100}, "n": 2}, "/v1/chat/completions")
        for c in resp["choices"]:
            content = c["message"]["content"]
            self.assertIsInstance(json.loads(content), dict)
            self.assertIn("print", content)

    def test_bad_n_and_logit_bias_are_400_naming_the_field(self):
        status, resp = self.srv.json("GET", "/v1/models")
        for body, param in [({"n": 17}, "n"), ({"n": 0}, "n"), ({"n": "2"}, "n"),
                            ({"logit_bias": {"999999999": 5}}, "logit_bias"),
                            ({"logit_bias": {"12": 101}}, "logit_bias"),
                            ({"logit_bias": {"twelve": 1}}, "logit_bias"),
                            ({"logit_bias": [1]}, "logit_bias"),
                            ({"logit_bias": {str(i): 1 for i in range(1025)}}, "logit_bias")]:
            for path, base in [("/v1/completions", {"prompt": "x"}),
                               ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})]:
                status, resp = self.srv.json("POST", path, dict(base, **body))
                self.assertEqual(status, 400, (path, body, resp))
                self.assertEqual(resp["error"]["param"], param, (path, resp))
        status, _ = self.srv.json("GET", "/health")
        self.assertEqual(status, 200)


def main():
    def use(args):
        global ARGS
        ARGS = args
    return run_e2e_tests(use)


if __name__ == "__main__":
    sys.exit(main())
