#!/usr/bin/env python3
"""End-to-end: tool requests against the real `sluice serve` and the bundled model. The tiny model writes
Python, never a tool call on its own, so these check the wiring that a real answer goes through: tools and
tool_choice accepted (200) or refused (400 naming the field); tool_choice required / named forcing calls
through constrained decoding (arguments validated against each function's parameters); and — with the model served under
Qwen2.5's Hermes-style template, so the answer really passes through the tool-call parser — that plain
answers come out unchanged (the same greedy text as with tool_choice "none", whole and streamed).
The parser's handling of real calls is covered by the unit tests (toolcall_test, server_unit_test)."""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server_harness import Server, run_e2e_tests  # noqa: E402

ARGS = None
HERE = os.path.dirname(os.path.abspath(__file__))
QWEN_TEMPLATE = os.path.join(HERE, "..", "..", "..", "shared", "chat_templates", "Qwen-Qwen2.5-7B-Instruct.jinja")

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
ASK = {"messages": [{"role": "user", "content": "def weather(city):"}], "max_tokens": 24, "temperature": 0}


def streamed_answer(srv, body):
    content, calls, finish = "", [], None
    for data in srv.stream("/v1/chat/completions", dict(body, stream=True)):
        if data == "[DONE]":
            break
        choice = json.loads(data)["choices"][0]
        content += choice["delta"].get("content") or ""
        calls += choice["delta"].get("tool_calls") or []
        finish = choice["finish_reason"] or finish
    return content, calls, finish


FORCED_TOOLS = TOOLS + [{"type": "function", "function": {
    "name": "book_table", "description": "Reserve a table",
    "parameters": {"type": "object", "properties": {
        "restaurant": {"type": "string", "maxLength": 20}, "people": {"type": "integer", "minimum": 1, "maximum": 12},
        "date": {"type": "string", "format": "date"}, "notes": {"type": ["string", "null"], "maxLength": 30}},
        "required": ["restaurant", "people", "date"], "additionalProperties": False}}}]


def arguments_valid(test, call):
    """A call's arguments parse and validate against its function's parameters (Python's jsonschema when
    installed — tools/setup.sh installs it — else the required keys are checked)."""
    tool = next(t for t in FORCED_TOOLS if t["function"]["name"] == call["function"]["name"])
    args = json.loads(call["function"]["arguments"])
    schema = tool["function"]["parameters"]
    try:
        import jsonschema
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        test.assertEqual([e.message for e in validator.iter_errors(args)], [], call)
    except ImportError:
        for key in schema.get("required", []):
            test.assertIn(key, args)


def check_forced_calls(test, srv):
    """tool_choice required / named: the answer is tool_calls (finish_reason tool_calls), arguments valid,
    whole and streamed alike; parallel_tool_calls false keeps one call."""
    for seed in range(4):
        for choice in ("required", {"type": "function", "function": {"name": "book_table"}}):
            body = dict(ASK, tools=FORCED_TOOLS, tool_choice=choice, max_tokens=160, temperature=0.9, seed=seed)
            status, reply = srv.json("POST", "/v1/chat/completions", body)
            test.assertEqual(status, 200, reply)
            choice0 = reply["choices"][0]
            calls = choice0["message"].get("tool_calls")
            test.assertTrue(calls, choice0)
            test.assertEqual(choice0["finish_reason"], "tool_calls", (choice, seed, reply))
            test.assertFalse((choice0["message"].get("content") or "").strip(), choice0)
            for call in calls:
                test.assertEqual(call["type"], "function")
                if isinstance(choice, dict):
                    test.assertEqual(call["function"]["name"], "book_table")
                arguments_valid(test, call)
            content, deltas, finish = streamed_answer(srv, body)
            test.assertEqual(finish, "tool_calls")
            streamed = {}
            for d in deltas:
                entry = streamed.setdefault(d["index"], {"name": "", "arguments": ""})
                entry["name"] += (d.get("function") or {}).get("name") or ""
                entry["arguments"] += (d.get("function") or {}).get("arguments") or ""
            test.assertEqual([streamed[i] for i in sorted(streamed)],
                             [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in calls])
    body = dict(ASK, tools=FORCED_TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=160, temperature=1.0, seed=5)
    status, reply = srv.json("POST", "/v1/chat/completions", body)
    test.assertEqual(status, 200, reply)
    test.assertEqual(len(reply["choices"][0]["message"]["tool_calls"]), 1)
    # A parameters schema the compiler cannot honour is a 400 naming tools.
    bad = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"x": {"not": {}}}}}}]
    status, reply = srv.json("POST", "/v1/chat/completions", dict(ASK, tools=bad, tool_choice="required"))
    test.assertEqual(status, 400, reply)
    test.assertEqual(reply["error"]["param"], "tools")
    test.assertIn("not", reply["error"]["message"])
    status, reply = srv.json("POST", "/v1/chat/completions", dict(ASK, tool_choice="required"))
    test.assertEqual(status, 400, reply)
    test.assertEqual(reply["error"]["param"], "tool_choice")


class ToolRequests(unittest.TestCase):
    """The bundled model under its own template (which has no call syntax: answers are text)."""

    @classmethod
    def setUpClass(cls):
        cls.srv = Server(ARGS.sluice, ARGS.model)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_tools_with_auto_and_none_are_answered(self):
        for choice in ("auto", "none", None):
            body = dict(ASK, tools=TOOLS)
            if choice:
                body["tool_choice"] = choice
            status, reply = self.srv.json("POST", "/v1/chat/completions", body)
            self.assertEqual(status, 200, reply)
            message = reply["choices"][0]["message"]
            self.assertIsInstance(message["content"], str)
            self.assertNotIn("tool_calls", message)
            self.assertIn(reply["choices"][0]["finish_reason"], ("stop", "length"))

    def test_required_and_named_choice_force_calls_whose_arguments_validate(self):
        check_forced_calls(self, self.srv)

    def test_bad_tools_are_400_naming_the_field(self):
        bad = [({"type": "function", "function": {"name": "a b"}}, "tools[0].function.name"),
               ({"type": "function", "function": {"name": "f", "parameters": []}}, "tools[0].function.parameters"),
               ({"type": "code_interpreter"}, "tools[0].type")]
        for tool, param in bad:
            status, reply = self.srv.json("POST", "/v1/chat/completions", dict(ASK, tools=[tool]))
            self.assertEqual(status, 400, reply)
            self.assertEqual(reply["error"]["param"], param)
        status, _ = self.srv.json("GET", "/health")
        self.assertEqual(status, 200)


class HermesTemplate(unittest.TestCase):
    """The bundled model served with Qwen2.5's template: tools render and the answer is parsed."""

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(QWEN_TEMPLATE):
            raise unittest.SkipTest("no " + QWEN_TEMPLATE)
        cls.dir = tempfile.mkdtemp(prefix="sluice-tools-")
        for name in os.listdir(ARGS.model):
            if name != "chat_template.jinja":
                os.symlink(os.path.join(os.path.abspath(ARGS.model), name), os.path.join(cls.dir, name))
        shutil.copy(QWEN_TEMPLATE, os.path.join(cls.dir, "chat_template.jinja"))
        cls.srv = Server(ARGS.sluice, cls.dir)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_tools_are_rendered_into_the_prompt(self):
        status, reply = self.srv.json("POST", "/apply-template", {"messages": ASK["messages"], "tools": TOOLS})
        self.assertEqual(status, 200, reply)
        self.assertIn("get_weather", json.dumps(reply))

    def test_required_and_named_choice_force_calls_in_the_templates_syntax(self):
        check_forced_calls(self, self.srv)

    def test_plain_answers_pass_through_the_parser_unchanged(self):
        body = dict(ASK, tools=TOOLS)
        status, plain = self.srv.json("POST", "/v1/chat/completions", dict(body, tool_choice="none"))
        self.assertEqual(status, 200, plain)
        status, parsed = self.srv.json("POST", "/v1/chat/completions", body)
        self.assertEqual(status, 200, parsed)
        text = plain["choices"][0]["message"]["content"]
        self.assertTrue(text)
        self.assertNotIn("<tool_call>", text)  # the tiny model writes Python, not calls
        self.assertEqual(parsed["choices"][0]["message"]["content"], text)
        self.assertNotIn("tool_calls", parsed["choices"][0]["message"])
        content, calls, finish = streamed_answer(self.srv, body)
        self.assertEqual(content, text)
        self.assertEqual(calls, [])
        self.assertEqual(finish, parsed["choices"][0]["finish_reason"])


def main():
    def use(args):
        global ARGS
        ARGS = args
    return run_e2e_tests(use)


if __name__ == "__main__":
    sys.exit(main())
