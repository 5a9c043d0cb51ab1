#!/usr/bin/env python3
"""End-to-end tests of what agents send `sluice serve` (the bundled model): an agent history replay
(assistant content null + tool_calls, then a tool message) answers 200; wrong types in it are 400s
naming the field; chat_template_kwargs / enable_thinking / reasoning_effort are accepted and checked;
GET /v1/models/{id}; and, with a <think>-style template beside the same weights, the answer's
reasoning in reasoning_content (plain and streamed) split exactly where a raw completion of the same
prompt puts </think>. Exit 77 (ctest SKIP_RETURN_CODE) when the binary or model is missing."""
import json
import os
import shutil
import sys
import tempfile
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server_harness import Server, run_e2e_tests  # noqa: E402

ARGS = None
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
REPLAY = [
    {"role": "system", "content": "You are a weather assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_abc123", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_abc123", "content": "18 degrees, sunny"},
]
# A Qwen3-style template: the generation prompt opens <think> unless enable_thinking is false.
THINK_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else %}{{- '<think>\\n' }}{%- endif %}{%- endif %}")
GREEDY = {"max_tokens": 24, "temperature": 0, "ignore_eos": True}


def expected_split(text, opened):
    """The split the API documents, as (reasoning_content, content). A prompt that opened <think>:
    reasoning until </think> (all of it when none). Otherwise: reasoning only when the answer opens
    with <think>, else no reasoning (None) and the text verbatim. Whitespace after each tag is dropped."""
    if not opened:
        if not text.lstrip().startswith("<think>"):
            return None, text
        text = text.lstrip()[len("<think>"):]
    if "</think>" in text:
        reasoning, content = text.split("</think>", 1)
        return reasoning.lstrip() or None, content.lstrip()
    return text.lstrip() or None, ""


class AgentRequests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server(ARGS.sluice, ARGS.model)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def test_history_replay_answers(self):
        status, body = self.srv.json("POST", "/v1/chat/completions",
                                     {"messages": REPLAY, "tools": TOOLS, "max_tokens": 16, "ignore_eos": True})
        self.assertEqual(status, 200, body)
        message = body["choices"][0]["message"]
        self.assertIsInstance(message["content"], str)
        self.assertGreater(len(message["content"]), 0)
        self.assertEqual(body["usage"]["completion_tokens"], 16)
        self.assertNotIn("reasoning_content", message)  # the bundled template does not think

    def test_history_replay_streams(self):
        text = ""
        for data in self.srv.stream("/v1/chat/completions", {"messages": REPLAY, "tools": TOOLS, "stream": True,
                                                              "max_tokens": 8, "ignore_eos": True}):
            if data == "[DONE]":
                break
            text += json.loads(data)["choices"][0]["delta"].get("content", "")
        self.assertGreater(len(text), 0)

    def test_history_renders_the_tool_answer_and_an_empty_assistant_turn(self):
        status, body = self.srv.json("POST", "/apply-template", {"messages": REPLAY, "tools": TOOLS})
        self.assertEqual(status, 200, body)
        self.assertIn("<|im_start|>assistant\n<|im_end|>\n<|im_start|>tool\n18 degrees, sunny<|im_end|>", body["prompt"])

    def test_wrong_types_in_the_history_are_400_naming_the_field(self):
        bad_arguments = json.loads(json.dumps(REPLAY))
        bad_arguments[2]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris"}
        no_call_id = json.loads(json.dumps(REPLAY))
        del no_call_id[3]["tool_call_id"]
        for messages, param in ((bad_arguments, "messages[2].tool_calls[0].function.arguments"),
                                (no_call_id, "messages[3].tool_call_id")):
            status, body = self.srv.json("POST", "/v1/chat/completions", {"messages": messages})
            self.assertEqual(status, 400, body)
            self.assertEqual(body["error"]["param"], param)
        status, _ = self.srv.json("GET", "/health")
        self.assertEqual(status, 200)  # still serving

    def test_template_controls_are_accepted_and_checked(self):
        ok = {"messages": REPLAY[:2], "max_tokens": 2, "enable_thinking": False, "reasoning_effort": "low",
              "chat_template_kwargs": {"documents": [], "enable_thinking": True}}
        status, body = self.srv.json("POST", "/v1/chat/completions", ok)
        self.assertEqual(status, 200, body)
        for field, value, param in (("chat_template_kwargs", {"messages": []}, "chat_template_kwargs.messages"),
                                    ("enable_thinking", "no", "enable_thinking"),
                                    ("reasoning_effort", "max", "reasoning_effort")):
            status, body = self.srv.json("POST", "/v1/chat/completions", {"messages": REPLAY[:2], field: value})
            self.assertEqual(status, 400, body)
            self.assertEqual(body["error"]["param"], param)

    def test_model_by_id(self):
        status, listing = self.srv.json("GET", "/v1/models")
        self.assertEqual(status, 200)
        model_id = listing["data"][0]["id"]
        for path in ("/v1/models/" + model_id, "/v1/models/" + urllib.parse.quote(model_id, safe=""),
                     "/models/" + model_id):
            status, body = self.srv.json("GET", path)
            self.assertEqual(status, 200, path)
            self.assertEqual(body["id"], model_id)
            self.assertEqual(body["object"], "model")
        status, body = self.srv.json("GET", "/v1/models/not-" + model_id)
        self.assertEqual(status, 404)
        self.assertEqual(body["error"]["code"], "model_not_found")
        self.assertEqual(body["error"]["type"], "invalid_request_error")


class ThinkingModel(unittest.TestCase):
    """The bundled weights with a <think> template beside them (symlinks in a temporary folder)."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sluice-think-")
        for name in os.listdir(ARGS.model):
            if name != "chat_template.jinja":
                os.symlink(os.path.abspath(os.path.join(ARGS.model, name)), os.path.join(cls.dir, name))
        with open(os.path.join(cls.dir, "chat_template.jinja"), "w") as f:
            f.write(THINK_TEMPLATE)
        cls.srv = Server(ARGS.sluice, cls.dir, "--thinking=off")  # requests below turn it on

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.dir)

    def raw_answer(self, messages, **extra):
        """What the model writes after the rendered prompt, as a plain completion."""
        status, rendered = self.srv.json("POST", "/apply-template", {"messages": messages, **extra})
        self.assertEqual(status, 200, rendered)
        status, body = self.srv.json("POST", "/v1/completions", {"prompt": rendered["prompt"], **GREEDY})
        self.assertEqual(status, 200, body)
        return rendered["prompt"], body["choices"][0]["text"]

    def test_reasoning_content_plain_and_streamed(self):
        messages = [{"role": "user", "content": "def fib(n):"}]
        prompt, raw = self.raw_answer(messages, enable_thinking=True)
        self.assertTrue(prompt.endswith("<think>\n"), prompt)
        reasoning, content = expected_split(raw, opened=True)
        self.assertGreater(len(reasoning or ""), 0)

        status, body = self.srv.json("POST", "/v1/chat/completions",
                                     {"messages": messages, "enable_thinking": True, **GREEDY})
        self.assertEqual(status, 200, body)
        message = body["choices"][0]["message"]
        self.assertEqual(message["reasoning_content"], reasoning)
        self.assertEqual(message["content"], content)

        streamed_reasoning, streamed_content, order = "", "", []
        for data in self.srv.stream("/v1/chat/completions",
                                    {"messages": messages, "stream": True, "enable_thinking": True, **GREEDY}):
            if data == "[DONE]":
                break
            delta = json.loads(data)["choices"][0]["delta"]
            if delta.get("reasoning_content"):
                streamed_reasoning += delta["reasoning_content"]
                order.append("r")
            if delta.get("content"):
                streamed_content += delta["content"]
                order.append("c")
        self.assertEqual(streamed_reasoning, reasoning or "")
        self.assertEqual(streamed_content, content)
        self.assertEqual(order, sorted(order, key=lambda k: k == "c"))  # all reasoning before any content

    def test_the_server_default_off_closes_the_block_and_the_answer_is_content(self):
        messages = [{"role": "user", "content": "def fib(n):"}]
        prompt, raw = self.raw_answer(messages)  # no enable_thinking: --thinking=off decides
        self.assertTrue(prompt.endswith("<think>\n\n</think>\n\n"), prompt)
        status, body = self.srv.json("POST", "/v1/chat/completions", {"messages": messages, **GREEDY})
        self.assertEqual(status, 200, body)
        message = body["choices"][0]["message"]
        reasoning, content = expected_split(raw, opened=False)
        self.assertEqual(message["reasoning_content"], reasoning)
        self.assertEqual(message["content"], content)
        self.assertGreater(len(message["content"]), 0)


def main():
    def use(args):
        global ARGS
        ARGS = args
    return run_e2e_tests(use)


if __name__ == "__main__":
    sys.exit(main())
