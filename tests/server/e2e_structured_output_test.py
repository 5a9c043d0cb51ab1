#!/usr/bin/env python3
"""End-to-end: structured outputs against the real `sluice serve` and the bundled model. Every schema in
data/schemas/ (shapes people ask for: addresses, products, events, issues, tool parameters, nested arrays,
enums, anyOf / oneOf, $ref trees) is requested under response_format json_schema, and each answer must
parse and validate under an independent validator (Python's jsonschema, formats checked). The tiny model
writes Python, never JSON, so everything it gets right here is the constrained decoder's doing; a small
max_tokens is enough because the matcher closes an output before the budget runs out."""
import datetime
import glob
import json
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server_harness import Server, run_e2e_tests  # noqa: E402

try:
    import jsonschema
except ImportError:  # tools/setup.sh installs python3-jsonschema
    print("SKIP: python3-jsonschema is not installed (tools/setup.sh)")
    sys.exit(77)

ARGS = None
HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = sorted(glob.glob(os.path.join(HERE, "data", "schemas", "*.json")))
MAX_TOKENS = 160


# The draft's own format checks (date, email, uuid, ipv4, ...); date-time and time are checked here too,
# strictly (RFC 3339's shape, then a real instant), since Debian's jsonschema lacks the package it would use.
RFC3339_TIME = r"\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})"
FORMATS = jsonschema.FormatChecker(formats=())
for fmt, check in jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers.items():
    FORMATS.checkers[fmt] = check


@FORMATS.checks("date-time", raises=ValueError)
def is_date_time(value):
    if not isinstance(value, str):
        return True
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}T" + RFC3339_TIME, value):
        return False
    return bool(datetime.datetime.fromisoformat(value.replace("Z", "+00:00")))


@FORMATS.checks("time", raises=ValueError)
def is_time(value):
    if not isinstance(value, str):
        return True
    if not re.fullmatch(RFC3339_TIME, value):
        return False
    return bool(datetime.time.fromisoformat(value.replace("Z", "+00:00")))


def validate(test, schema, text, where):
    try:
        value = json.loads(text)
    except ValueError as e:
        test.fail("%s: not JSON (%s): %r" % (where, e, text))
    validator = jsonschema.Draft202012Validator(schema, format_checker=FORMATS)
    errors = [e.message for e in validator.iter_errors(value)]
    test.assertEqual(errors, [], "%s: %r" % (where, text))
    return value


def ask(name, schema, **extra):
    body = {"messages": [{"role": "user", "content": "Reply with JSON: %s" % name.replace("_", " ")}],
            "max_tokens": MAX_TOKENS, "temperature": 0.8, "seed": 7,
            "response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}}
    body.update(extra)
    return body


def streamed_text(srv, body):
    text, finish = "", None
    for data in srv.stream("/v1/chat/completions", dict(body, stream=True)):
        if data == "[DONE]":
            break
        choice = json.loads(data)["choices"][0]
        text += choice["delta"].get("content") or ""
        finish = choice["finish_reason"] or finish
    return text, finish


class StructuredOutputs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server(ARGS.sluice, ARGS.model, "--parallel", "4")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_at_least_thirty_real_world_schemas(self):
        self.assertGreaterEqual(len(SCHEMAS), 30)

    def test_every_schema_answer_validates(self):
        for path in SCHEMAS:
            name = os.path.splitext(os.path.basename(path))[0]
            with open(path) as f:
                schema = json.load(f)
            with self.subTest(schema=name):
                status, reply = self.srv.json("POST", "/v1/chat/completions", ask(name, schema))
                self.assertEqual(status, 200, reply)
                choice = reply["choices"][0]
                self.assertEqual(choice["finish_reason"], "stop", choice)
                self.assertLessEqual(reply["usage"]["completion_tokens"], MAX_TOKENS)
                validate(self, schema, choice["message"]["content"], name)

    def test_greedy_and_streamed_answers_validate_and_agree(self):
        for path in SCHEMAS[::6]:
            name = os.path.splitext(os.path.basename(path))[0]
            with open(path) as f:
                schema = json.load(f)
            with self.subTest(schema=name):
                body = ask(name, schema, temperature=0)
                status, reply = self.srv.json("POST", "/v1/chat/completions", body)
                self.assertEqual(status, 200, reply)
                whole = reply["choices"][0]["message"]["content"]
                validate(self, schema, whole, name)
                text, finish = streamed_text(self.srv, body)
                self.assertEqual(text, whole)
                self.assertEqual(finish, "stop")

    def test_batched_requests_each_follow_their_own_schema(self):
        """Four requests at once (--parallel 4): three schemas and one free answer share the engine's
        batches; each mask applies to its own sequence."""
        import threading
        picks = SCHEMAS[1::9][:3]
        results = {}

        def run(key, body):
            results[key] = self.srv.json("POST", "/v1/chat/completions", body)

        threads = []
        for path in picks:
            with open(path) as f:
                schema = json.load(f)
            threads.append(threading.Thread(target=run, args=(path, ask(os.path.basename(path), schema))))
        free = {"messages": [{"role": "user", "content": "def add(a, b):"}], "max_tokens": 40, "temperature": 0}
        threads.append(threading.Thread(target=run, args=("free", free)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for path in picks:
            status, reply = results[path]
            self.assertEqual(status, 200, reply)
            with open(path) as f:
                validate(self, json.load(f), reply["choices"][0]["message"]["content"], path)
        status, reply = results["free"]
        self.assertEqual(status, 200, reply)
        status, alone = self.srv.json("POST", "/v1/chat/completions", free)
        self.assertEqual(reply["choices"][0]["message"]["content"], alone["choices"][0]["message"]["content"])

    def test_logprobs_list_only_allowed_alternatives(self):
        body = {"messages": [{"role": "user", "content": "x"}], "max_tokens": 10, "logprobs": True, "top_logprobs": 3,
                "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": {"const": "ok"}}}}
        status, reply = self.srv.json("POST", "/v1/chat/completions", body)
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["choices"][0]["message"]["content"], '"ok"')
        for entry in reply["choices"][0]["logprobs"]["content"]:
            for alt in entry["top_logprobs"]:
                self.assertTrue(set(alt["token"]) <= set('"ok'), entry)
                self.assertGreater(alt["logprob"], -9999, entry)

    def test_json_object_is_one_object(self):
        body = {"messages": [{"role": "user", "content": "A person as JSON"}], "max_tokens": 60, "temperature": 0.9, "seed": 1,
                "response_format": {"type": "json_object"}}
        for seed in range(3):
            status, reply = self.srv.json("POST", "/v1/chat/completions", dict(body, seed=seed))
            self.assertEqual(status, 200, reply)
            value = json.loads(reply["choices"][0]["message"]["content"])
            self.assertIsInstance(value, dict)
        # Text completions take response_format too.
        status, reply = self.srv.json("POST", "/v1/completions", {"prompt": "data = ", "max_tokens": 40, "temperature": 0,
                                                                   "response_format": {"type": "json_object"}})
        self.assertEqual(status, 200, reply)
        self.assertIsInstance(json.loads(reply["choices"][0]["text"]), dict)

    def test_unsupported_or_malformed_schemas_are_400_naming_the_field(self):
        cases = [
            ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "string", "pattern": "^(?=a)a+$"}}},
             "response_format.json_schema.schema", "pattern"),
            ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "patternProperties": {"^a": {}}}}},
             "response_format.json_schema.schema", "patternProperties"),
            ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "https://example.com/a.json"}}},
             "response_format.json_schema.schema", "$ref"),
            ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": True}}},
             "response_format.json_schema.schema", "uniqueItems"),
            ({"type": "json_schema", "json_schema": {"name": "x", "schema": "nope"}}, "response_format.json_schema.schema", None),
            ({"type": "json_schema", "json_schema": []}, "response_format.json_schema", None),
            ({"type": "json_schema", "json_schema": {"name": 3, "schema": {}}}, "response_format.json_schema.name", None),
            ({"type": "xml"}, "response_format", None),
        ]
        for response_format, param, word in cases:
            with self.subTest(response_format=response_format):
                status, reply = self.srv.json("POST", "/v1/chat/completions",
                                              {"messages": [{"role": "user", "content": "x"}], "response_format": response_format})
                self.assertEqual(status, 400, reply)
                self.assertEqual(reply["error"]["param"], param)
                if word:
                    self.assertIn(word, reply["error"]["message"])
        # The server keeps serving.
        status, _ = self.srv.json("POST", "/v1/chat/completions", ask("geo point", {"type": "integer"}))
        self.assertEqual(status, 200)


def main():
    def use(args):
        global ARGS
        ARGS = args
    return run_e2e_tests(use)


if __name__ == "__main__":
    sys.exit(main())
