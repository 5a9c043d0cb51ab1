#!/usr/bin/env python3
"""End-to-end: OpenAI's Responses API (POST /v1/responses) and Anthropic's Messages API (POST /v1/messages)
against the real `sluice serve` and the bundled model. Both are translations of chat completions, so the
checks compare them with /v1/chat/completions on the same greedy request (same text, same token counts),
read their streams as a client written against each API's documented wire format would (named SSE events,
sequence numbers, content blocks), force tool calls through tool_choice and validate the arguments, and
check that bad requests get each API's error shape with a 400. No Anthropic SDK is installed; the stream
reader below is that client."""
import json
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server_harness import Server, run_e2e_tests  # noqa: E402
from e2e_agent_test import THINK_TEMPLATE  # noqa: E402  (a Qwen3-style template that opens <think>)

ARGS = None
PROMPT = "def fibonacci(n):"
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                   "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                  "required": ["city", "days"], "additionalProperties": False}


def validate(test, instance, schema):
    """Python's jsonschema (tools/setup.sh installs python3-jsonschema) when present, else the required keys."""
    try:
        import jsonschema
        test.assertEqual([e.message for e in jsonschema.Draft202012Validator(schema).iter_errors(instance)], [], instance)
    except ImportError:
        for key in schema.get("required", []):
            test.assertIn(key, instance)


def sse_events(srv, path, body, headers=None):
    """POSTs and returns [(event name, data object)] as the stream gives them (event: / data: lines)."""
    conn = srv.connection(60)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json", **(headers or {})})
        res = conn.getresponse()
        if res.status != 200:
            raise AssertionError("stream status %d: %s" % (res.status, res.read()))
        assert res.getheader("Content-Type", "").startswith("text/event-stream")
        raw = res.read().decode()
    finally:
        conn.close()
    events = []
    for block in raw.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data.append(line[len("data: "):])
            else:
                raise AssertionError("unexpected SSE line %r" % line)
        payload = json.loads("\n".join(data))
        assert name == payload["type"], (name, payload)
        events.append((name, payload))
    return events


class ResponsesApi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server(ARGS.sluice, ARGS.model)

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def chat(self, **body):
        status, reply = self.srv.json("POST", "/v1/chat/completions", body)
        self.assertEqual(status, 200, reply)
        return reply

    def create(self, **body):
        status, reply = self.srv.json("POST", "/v1/responses", body)
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["object"], "response")
        return reply

    @staticmethod
    def text_of(response):
        return "".join(part["text"] for item in response["output"] if item["type"] == "message"
                       for part in item["content"] if part["type"] == "output_text")

    def test_answers_as_the_chat_completion_does(self):
        r = self.create(model="tiny-code-qwen2", instructions="You write Python.", input=PROMPT,
                        max_output_tokens=20, temperature=0)
        c = self.chat(messages=[{"role": "system", "content": "You write Python."}, {"role": "user", "content": PROMPT}],
                      max_tokens=20, temperature=0)
        self.assertEqual(self.text_of(r), c["choices"][0]["message"]["content"])
        self.assertEqual(r["usage"]["input_tokens"], c["usage"]["prompt_tokens"])
        self.assertEqual(r["usage"]["output_tokens"], c["usage"]["completion_tokens"])
        self.assertEqual(r["status"], "incomplete" if c["choices"][0]["finish_reason"] == "length" else "completed")
        self.assertEqual(r["max_output_tokens"], 20)
        self.assertTrue(r["id"].startswith("resp_"))

    def test_stream_is_the_typed_event_sequence_and_reassembles_the_answer(self):
        body = dict(input=[{"role": "user", "content": [{"type": "input_text", "text": PROMPT}]}],
                    max_output_tokens=24, temperature=0)
        whole = self.create(**body)
        events = sse_events(self.srv, "/v1/responses", dict(body, stream=True))
        names = [n for n, _ in events]
        self.assertEqual(names[:2], ["response.created", "response.in_progress"])
        self.assertIn(names[-1], ("response.completed", "response.incomplete"))
        self.assertEqual([e["sequence_number"] for _, e in events], list(range(len(events))))
        self.assertEqual(names[2:4], ["response.output_item.added", "response.content_part.added"])
        self.assertEqual(names[-4:-1], ["response.output_text.done", "response.content_part.done", "response.output_item.done"])
        deltas = "".join(e["delta"] for n, e in events if n == "response.output_text.delta")
        final = events[-1][1]["response"]
        self.assertEqual(deltas, self.text_of(whole))
        self.assertEqual(self.text_of(final), deltas)
        self.assertEqual(final["id"], events[0][1]["response"]["id"])
        self.assertEqual(final["usage"]["output_tokens"], whole["usage"]["output_tokens"])

    def test_tool_choice_required_gives_function_calls_whose_arguments_validate(self):
        tools = [{"type": "function", "name": "get_forecast", "description": "Weather forecast",
                  "parameters": WEATHER_SCHEMA}]
        body = dict(input="Weather in Paris for 3 days?", tools=tools, tool_choice="required",
                    max_output_tokens=120, temperature=0)
        r = self.create(**body)
        calls = [item for item in r["output"] if item["type"] == "function_call"]
        self.assertTrue(calls, r)
        for call in calls:
            self.assertEqual(call["name"], "get_forecast")
            self.assertTrue(call["call_id"])
            validate(self, json.loads(call["arguments"]), WEATHER_SCHEMA)
        events = sse_events(self.srv, "/v1/responses", dict(body, stream=True))
        streamed = {}
        for name, e in events:
            if name == "response.output_item.added" and e["item"]["type"] == "function_call":
                streamed[e["output_index"]] = {"name": e["item"]["name"], "arguments": ""}
            elif name == "response.function_call_arguments.delta":
                streamed[e["output_index"]]["arguments"] += e["delta"]
            elif name == "response.function_call_arguments.done":
                self.assertEqual(e["arguments"], streamed[e["output_index"]]["arguments"])
        self.assertEqual([streamed[i] for i in sorted(streamed)],
                         [{"name": c["name"], "arguments": c["arguments"]} for c in calls])

    def test_an_agent_loop_history_is_answered(self):
        r = self.create(input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_forecast", "arguments": '{"city":"Paris","days":1}'},
            {"type": "function_call_output", "call_id": "call_1", "output": "18C, sunny"}],
            tools=[{"type": "function", "name": "get_forecast", "parameters": WEATHER_SCHEMA}],
            max_output_tokens=8, temperature=0)
        self.assertIsInstance(self.text_of(r), str)
        self.assertEqual(r["tools"][0]["name"], "get_forecast")

    def test_text_format_json_schema_is_enforced(self):
        schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 15},
                                                   "tags": {"type": "array", "items": {"type": "string", "maxLength": 10},
                                                            "maxItems": 3}},
                  "required": ["name", "tags"], "additionalProperties": False}
        r = self.create(input="A project", text={"format": {"type": "json_schema", "name": "project", "schema": schema,
                                                            "strict": True}},
                        max_output_tokens=120, temperature=0)
        validate(self, json.loads(self.text_of(r)), schema)
        self.assertEqual(r["text"]["format"]["name"], "project")

    def test_previous_response_id_continues_a_stored_conversation(self):
        first = self.create(instructions="You write Python.", input=PROMPT, max_output_tokens=12, temperature=0)
        self.assertTrue(first["store"])
        status, got = self.srv.json("GET", "/v1/responses/" + first["id"])
        self.assertEqual(status, 200, got)
        self.assertEqual(got["output"], first["output"])
        # The continuation sees the first input and answer (not its instructions), then the new input...
        second = self.create(previous_response_id=first["id"], input="Now add a docstring.", max_output_tokens=12,
                             temperature=0)
        self.assertEqual(second["previous_response_id"], first["id"])
        history = [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": self.text_of(first)},
                   {"role": "user", "content": "Now add a docstring."}]
        c = self.chat(messages=history, max_tokens=12, temperature=0)
        self.assertEqual(self.text_of(second), c["choices"][0]["message"]["content"])
        self.assertEqual(second["usage"]["input_tokens"], c["usage"]["prompt_tokens"])
        # ...and streamed answers are stored too, so a chain goes on.
        events = sse_events(self.srv, "/v1/responses", dict(previous_response_id=second["id"], input="Thanks.",
                                                              max_output_tokens=4, stream=True))
        third = events[-1][1]["response"]
        status, got = self.srv.json("GET", "/v1/responses/" + third["id"])
        self.assertEqual(status, 200, got)
        self.assertEqual(got["usage"], third["usage"])
        status, reply = self.srv.json("DELETE", "/v1/responses/" + first["id"])
        self.assertEqual((status, reply["deleted"]), (200, True), reply)
        for method, path, body in (("GET", "/v1/responses/" + first["id"], None),
                                   ("POST", "/v1/responses", {"previous_response_id": first["id"], "input": "x"})):
            status, reply = self.srv.json(method, path, body)
            self.assertEqual(status, 404, reply)
        self.assertEqual(reply["error"]["param"], "previous_response_id")

    def test_store_false_keeps_nothing(self):
        r = self.create(input=PROMPT, max_output_tokens=2, store=False)
        self.assertFalse(r["store"])
        status, reply = self.srv.json("GET", "/v1/responses/" + r["id"])
        self.assertEqual(status, 404, reply)

    def test_a_function_call_continues_with_its_output_by_previous_response_id(self):
        tools = [{"type": "function", "name": "get_forecast", "parameters": WEATHER_SCHEMA}]
        r = self.create(input="Weather in Paris?", tools=tools, tool_choice="required", max_output_tokens=120,
                        temperature=0, parallel_tool_calls=False)
        call = next(item for item in r["output"] if item["type"] == "function_call")
        follow = self.create(previous_response_id=r["id"], tools=tools, max_output_tokens=6, temperature=0,
                             input=[{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}])
        self.assertEqual(follow["status"] in ("completed", "incomplete"), True)
        self.assertGreater(follow["usage"]["input_tokens"], r["usage"]["input_tokens"])

    def test_bad_requests_are_400_naming_the_responses_field(self):
        cases = [({"input": "x", "conversation": "conv_1"}, "conversation"),
                 ({"input": "x", "store": "yes"}, "store"),
                 ({"model": "m"}, "input"),
                 ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]},
                  "input[0].content[0].type"),
                 ({"input": "x", "tools": [{"type": "function", "name": "bad name"}]}, "tools[0].name"),
                 ({"input": "x", "tools": [{"type": "file_search"}]}, "tools[0].type"),
                 ({"input": "x", "max_output_tokens": 0}, "max_output_tokens"),
                 ({"input": "x", "text": {"format": {"type": "json_schema", "schema": {"type": "object"}}}}, "text.format.name")]
        for body, param in cases:
            status, reply = self.srv.json("POST", "/v1/responses", body)
            self.assertEqual(status, 400, (body, reply))
            self.assertEqual(reply["error"]["param"], param, reply)
        status, _ = self.srv.json("GET", "/health")
        self.assertEqual(status, 200)


class MessagesApi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.srv = Server(ARGS.sluice, ARGS.model, "--api-key", "sekrit")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    KEY = {"x-api-key": "sekrit", "anthropic-version": "2023-06-01"}

    def create(self, **body):
        status, reply = self.srv.json("POST", "/v1/messages", body, headers=self.KEY)
        self.assertEqual(status, 200, reply)
        self.assertEqual(reply["type"], "message")
        return reply

    def test_answers_as_the_chat_completion_does(self):
        m = self.create(model="tiny-code-qwen2", system="You write Python.", max_tokens=20, temperature=0,
                        messages=[{"role": "user", "content": [{"type": "text", "text": PROMPT}]}])
        status, c = self.srv.json("POST", "/v1/chat/completions", {
            "messages": [{"role": "system", "content": "You write Python."}, {"role": "user", "content": PROMPT}],
            "max_tokens": 20, "temperature": 0}, headers={"Authorization": "Bearer sekrit"})
        self.assertEqual(status, 200, c)
        self.assertEqual(m["role"], "assistant")
        self.assertEqual([b["type"] for b in m["content"]], ["text"])
        self.assertEqual(m["content"][0]["text"], c["choices"][0]["message"]["content"])
        self.assertEqual(m["stop_reason"], "max_tokens" if c["choices"][0]["finish_reason"] == "length" else "end_turn")
        self.assertEqual(m["usage"]["input_tokens"] + m["usage"]["cache_read_input_tokens"], c["usage"]["prompt_tokens"])
        self.assertEqual(m["usage"]["output_tokens"], c["usage"]["completion_tokens"])

    def test_stream_event_sequence_reassembles_the_answer(self):
        body = dict(max_tokens=24, temperature=0, messages=[{"role": "user", "content": PROMPT}])
        whole = self.create(**body)
        events = sse_events(self.srv, "/v1/messages", dict(body, stream=True), headers=self.KEY)
        names = [n for n, _ in events]
        self.assertEqual(names[0], "message_start")
        self.assertEqual(names[-2:], ["message_delta", "message_stop"])
        start = events[0][1]["message"]
        self.assertEqual((start["role"], start["content"], start["stop_reason"]), ("assistant", [], None))
        self.assertEqual(start["usage"]["input_tokens"], whole["usage"]["input_tokens"] + whole["usage"]["cache_read_input_tokens"])
        blocks = [n for n in names if n not in ("ping", "content_block_delta")]
        self.assertEqual(blocks, ["message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop"])
        text = "".join(e["delta"]["text"] for n, e in events if n == "content_block_delta")
        self.assertEqual(text, whole["content"][0]["text"])
        self.assertEqual(events[-2][1]["delta"]["stop_reason"], whole["stop_reason"])
        self.assertEqual(events[-2][1]["usage"]["output_tokens"], whole["usage"]["output_tokens"])

    def test_stop_sequences_stop_with_stop_reason_stop_sequence(self):
        whole = self.create(max_tokens=24, temperature=0, messages=[{"role": "user", "content": PROMPT}])
        text = whole["content"][0]["text"]
        word = next(w for w in text.split() if len(w) >= 2)  # a word the greedy answer writes
        m = self.create(max_tokens=24, temperature=0, messages=[{"role": "user", "content": PROMPT}],
                        stop_sequences=["\u2603never", word])
        self.assertEqual(m["stop_reason"], "stop_sequence", m)
        self.assertEqual(m["stop_sequence"], word)
        self.assertEqual(m["content"][0]["text"], text[:text.index(word)])
        # Underneath, the chat completion names the stop string (vLLM's stop_reason), whole and streamed.
        chat = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": 24, "temperature": 0, "stop": [word]}
        status, c = self.srv.json("POST", "/v1/chat/completions", chat, headers=self.KEY)
        self.assertEqual(status, 200, c)
        self.assertEqual((c["choices"][0]["finish_reason"], c["choices"][0]["stop_reason"]), ("stop", word))
        last = [json.loads(d) for d in self.srv.stream("/v1/chat/completions", dict(chat, stream=True),
                                                       headers={"Authorization": "Bearer sekrit"}) if d != "[DONE]"][-1]
        self.assertEqual(last["choices"][0]["stop_reason"], word)
        status, c = self.srv.json("POST", "/v1/chat/completions", dict(chat, stop=["\u2603never"]), headers=self.KEY)
        self.assertNotIn("stop_reason", c["choices"][0])

    def test_tool_choice_any_gives_tool_use_blocks_whose_input_validates(self):
        body = dict(max_tokens=120, temperature=0, messages=[{"role": "user", "content": "Weather in Paris for 3 days?"}],
                    tools=[{"name": "get_forecast", "description": "Weather forecast", "input_schema": WEATHER_SCHEMA}],
                    tool_choice={"type": "any"})
        m = self.create(**body)
        self.assertEqual(m["stop_reason"], "tool_use", m)
        uses = [b for b in m["content"] if b["type"] == "tool_use"]
        self.assertTrue(uses, m)
        for use in uses:
            self.assertTrue(use["id"].startswith("toolu_"))
            self.assertEqual(use["name"], "get_forecast")
            validate(self, use["input"], WEATHER_SCHEMA)
        events = sse_events(self.srv, "/v1/messages", dict(body, stream=True), headers=self.KEY)
        blocks, partial = {}, {}
        for name, e in events:
            if name == "content_block_start":
                blocks[e["index"]] = e["content_block"]
                partial[e["index"]] = ""
            elif name == "content_block_delta" and e["delta"]["type"] == "input_json_delta":
                partial[e["index"]] += e["delta"]["partial_json"]
        streamed = [(b["name"], json.loads(partial[i])) for i, b in sorted(blocks.items()) if b["type"] == "tool_use"]
        self.assertEqual(streamed, [(u["name"], u["input"]) for u in uses])
        self.assertEqual(events[-2][1]["delta"]["stop_reason"], "tool_use")
        # The calls and their results replay as the next turn.
        follow = self.create(max_tokens=8, temperature=0, tools=body["tools"], messages=body["messages"] + [
            {"role": "assistant", "content": uses},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": u["id"], "content": "sunny"} for u in uses]}])
        self.assertIn(follow["stop_reason"], ("end_turn", "max_tokens"))

    def test_count_tokens_is_the_prompt_length(self):
        body = {"system": "You write Python.", "messages": [{"role": "user", "content": PROMPT}]}
        status, counted = self.srv.json("POST", "/v1/messages/count_tokens", body, headers=self.KEY)
        self.assertEqual(status, 200, counted)
        m = self.create(max_tokens=1, **body)
        self.assertEqual(counted["input_tokens"], m["usage"]["input_tokens"] + m["usage"]["cache_read_input_tokens"])
        status, reply = self.srv.json("POST", "/v1/messages/count_tokens", {"messages": []}, headers=self.KEY)
        self.assertEqual(status, 400, reply)
        self.assertEqual(reply["type"], "error")

    def test_errors_have_anthropics_shape(self):
        cases = [({"messages": [{"role": "user", "content": "x"}]}, 400, "max_tokens"),
                 ({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, 400, "image"),
                 ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "temperature": 5}, 400, "temperature")]
        for body, status, word in cases:
            got, reply = self.srv.json("POST", "/v1/messages", body, headers=self.KEY)
            self.assertEqual(got, status, reply)
            self.assertEqual(reply["type"], "error")
            self.assertEqual(reply["error"]["type"], "invalid_request_error")
            self.assertIn(word, reply["error"]["message"])

    def test_api_key_by_x_api_key_or_bearer(self):
        body = {"max_tokens": 2, "messages": [{"role": "user", "content": "x"}]}
        status, reply = self.srv.json("POST", "/v1/messages", body)
        self.assertEqual(status, 401, reply)
        self.assertEqual(reply["error"]["type"], "authentication_error")
        status, reply = self.srv.json("POST", "/v1/messages", body, headers={"x-api-key": "wrong"})
        self.assertEqual(status, 401, reply)
        status, reply = self.srv.json("POST", "/v1/messages", body, headers={"Authorization": "Bearer sekrit"})
        self.assertEqual(status, 200, reply)


class ThinkingModel(unittest.TestCase):
    """The bundled weights with a <think> template beside them: the reasoning split comes out as a Responses
    reasoning item and an Anthropic thinking block, the same text as chat's reasoning_content."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="sluice-think-api-")
        for name in os.listdir(ARGS.model):
            if name != "chat_template.jinja":
                os.symlink(os.path.abspath(os.path.join(ARGS.model, name)), os.path.join(cls.dir, name))
        with open(os.path.join(cls.dir, "chat_template.jinja"), "w") as f:
            f.write(THINK_TEMPLATE)
        cls.srv = Server(ARGS.sluice, cls.dir, "--thinking=off")  # the requests below turn it on

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()
        shutil.rmtree(cls.dir)

    def chat_split(self):
        status, body = self.srv.json("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": PROMPT}], "enable_thinking": True, "max_tokens": 24,
            "temperature": 0, "ignore_eos": True})
        self.assertEqual(status, 200, body)
        message = body["choices"][0]["message"]
        self.assertTrue(message["reasoning_content"])
        return message["reasoning_content"], message["content"]

    def test_responses_reasoning_items(self):
        reasoning, content = self.chat_split()
        body = {"input": PROMPT, "reasoning": {"effort": "high"}, "max_output_tokens": 24, "temperature": 0,
                "ignore_eos": True}
        status, r = self.srv.json("POST", "/v1/responses", body)
        self.assertEqual(status, 200, r)
        self.assertEqual(r["output"][0]["type"], "reasoning")
        self.assertEqual(r["output"][0]["content"][0]["text"], reasoning)
        self.assertEqual("".join(p["text"] for i in r["output"] if i["type"] == "message" for p in i["content"]), content)
        events = sse_events(self.srv, "/v1/responses", dict(body, stream=True))
        self.assertEqual("".join(e["delta"] for n, e in events if n == "response.reasoning_text.delta"), reasoning)
        self.assertEqual("".join(e["delta"] for n, e in events if n == "response.output_text.delta"), content)
        # effort "none" turns thinking off: no reasoning item.
        status, r = self.srv.json("POST", "/v1/responses", dict(body, reasoning={"effort": "none"}))
        self.assertEqual(status, 200, r)
        self.assertNotIn("reasoning", [i["type"] for i in r["output"]])

    def test_messages_thinking_blocks(self):
        reasoning, content = self.chat_split()
        body = {"max_tokens": 24, "temperature": 0, "ignore_eos": True, "thinking": {"type": "enabled", "budget_tokens": 1024},
                "messages": [{"role": "user", "content": PROMPT}]}
        status, m = self.srv.json("POST", "/v1/messages", body)
        self.assertEqual(status, 200, m)
        self.assertEqual(m["content"][0], {"type": "thinking", "thinking": reasoning, "signature": ""})
        self.assertEqual("".join(b.get("text", "") for b in m["content"] if b["type"] == "text"), content)
        events = sse_events(self.srv, "/v1/messages", dict(body, stream=True))
        self.assertEqual(events[2][1]["content_block"]["type"], "thinking")  # after message_start and ping
        self.assertEqual("".join(e["delta"]["thinking"] for n, e in events
                                 if n == "content_block_delta" and e["delta"]["type"] == "thinking_delta"), reasoning)


def main():
    def use(args):
        global ARGS
        ARGS = args
    return run_e2e_tests(use)


if __name__ == "__main__":
    sys.exit(main())
