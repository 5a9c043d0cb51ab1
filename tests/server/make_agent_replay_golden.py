#!/usr/bin/env python3
"""Writes tests/server/data/agent_replay_golden.json and template_controls_golden.json. The first: an agent history replay (an assistant turn with
content null and tool_calls, then the tool's answer) rendered by Jinja2 the way transformers'
apply_chat_template renders, for every template in ../shared/chat_templates that mentions tool_calls,
in each of the four spellings a template may want (arguments as an object or the JSON string; null
content kept or made ""). agent_history_test.cpp checks that the spelling Sluice's probe picks
renders byte-exactly like Jinja2, and that a template it skips fails in Jinja2 too. The second: a
Qwen3 and a gpt-oss template rendered with enable_thinking / reasoning_effort / a custom variable
unset and set, for template_controls_test.cpp.

Needs jinja2 (3.1); run from the project root: python3 tests/server/make_agent_replay_golden.py
"""
import datetime
import json
import pathlib

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = ROOT.parent / "shared" / "chat_templates"
GOLDEN = ROOT.parent / "shared" / "golden" / "chat_templates_golden.json"
OUT = ROOT / "tests" / "server" / "data" / "agent_replay_golden.json"
CONTROLS_OUT = ROOT / "tests" / "server" / "data" / "template_controls_golden.json"
# (template, the variables beyond messages) for the controls golden.
CONTROL_CASES = [
    ("Qwen-Qwen3-0.6B.jinja", {}),
    ("Qwen-Qwen3-0.6B.jinja", {"enable_thinking": False}),
    ("Qwen-Qwen3-0.6B.jinja", {"enable_thinking": True}),
    ("openai-gpt-oss-120b.jinja", {}),
    ("openai-gpt-oss-120b.jinja", {"reasoning_effort": "low"}),
    ("openai-gpt-oss-120b.jinja", {"reasoning_effort": "high", "model_identity": "You are a tiny test model."}),
]

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                   "required": ["city"]}}}]
ARGUMENTS = '{"city": "Paris", "unit": "celsius"}'
# The OpenAI form, exactly as a client replays it (Mistral templates want nine-alphanumeric ids).
MESSAGES = [
    {"role": "system", "content": "You are a weather assistant."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call0Pari", "type": "function", "function": {"name": "get_weather", "arguments": ARGUMENTS}}]},
    {"role": "tool", "tool_call_id": "call0Pari", "name": "get_weather", "content": "18 degrees, sunny"},
]


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime(2026, 11, 22, 9, 30).strftime(fmt)
    return env


def spelled(arguments_as_object, null_content):
    messages = json.loads(json.dumps(MESSAGES))
    for m in messages:
        if m.get("content", "") is None and not null_content:
            m["content"] = ""
        for call in m.get("tool_calls", []):
            if arguments_as_object:
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return messages


def special_tokens():
    tokens = {}
    for case in json.loads(GOLDEN.read_text())["cases"]:
        v = case["variables"]
        tokens[case["template"]] = (v.get("bos_token", ""), v.get("eos_token", ""))
    return tokens


def main():
    tokens = special_tokens()
    out = {"renderer": "jinja2 %s sandboxed, trim_blocks, lstrip_blocks, loopcontrols; tojson(ensure_ascii=False); "
                       "strftime_now fixed at 2026-11-22T09:30:00" % jinja2.__version__,
           "messages": MESSAGES, "tools": TOOLS, "templates": {}}
    for path in sorted(TEMPLATES.glob("*.jinja")):
        source = path.read_text()
        if "tool_calls" not in source:
            continue
        bos, eos = tokens.get(path.name, ("", ""))
        template = environment().from_string(source)
        forms = {}
        for as_object in (True, False):
            for null_content in (True, False):
                key = ("object" if as_object else "string") + "/" + ("null" if null_content else "empty")
                try:
                    forms[key] = {"rendered": template.render(messages=spelled(as_object, null_content), tools=TOOLS,
                                                              add_generation_prompt=True, bos_token=bos, eos_token=eos)}
                except Exception as e:  # noqa: BLE001 - any Jinja2 failure is what the golden records
                    forms[key] = {"error": "%s: %s" % (type(e).__name__, e)}
        out["templates"][path.name] = {"bos_token": bos, "eos_token": eos, "forms": forms}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    print("wrote", OUT, len(out["templates"]), "templates")

    messages = [{"role": "user", "content": "Is 7 prime?"}]
    cases = []
    for name, extra in CONTROL_CASES:
        bos, eos = tokens.get(name, ("", ""))
        template = environment().from_string((TEMPLATES / name).read_text())
        rendered = template.render(messages=messages, add_generation_prompt=True, bos_token=bos, eos_token=eos, **extra)
        cases.append({"template": name, "bos_token": bos, "eos_token": eos, "variables": extra, "rendered": rendered})
    CONTROLS_OUT.write_text(json.dumps({"messages": messages, "cases": cases}, ensure_ascii=False, indent=1) + "\n")
    print("wrote", CONTROLS_OUT, len(cases), "cases")


if __name__ == "__main__":
    main()
