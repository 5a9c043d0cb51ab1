#!/usr/bin/env python3
"""End-to-end: tool requests against the real `sluice serve` and the bundled model. The tiny model writes
Python, never a tool call, so these check the wiring that a real answer goes through: tools and
tool_choice accepted (200) or refused (400 naming the field), and — with the model served under
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

    def test_required_and_named_choice_are_400_until_constrained_decoding(self):
        for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
            status, reply = self.srv.json("POST", "/v1/chat/completions", dict(ASK, tools=TOOLS, tool_choice=choice))
            self.assertEqual(status, 400)
            self.assertEqual(reply["error"]["param"], "tool_choice")
            self.assertIn("constrained decoding", reply["error"]["message"])

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
