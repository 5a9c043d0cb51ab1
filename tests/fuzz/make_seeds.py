#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora from the reference data (../shared): real request shapes,
safetensors headers, config.json files, tokenizer golden texts and ids, chat templates with their golden
variables. Usage: make_seeds.py REFERENCE_DIR OUT_DIR — OUT_DIR/<harness>/ is emptied and refilled, so the
seeds are the same on every machine with the same reference data."""
import hashlib
import json
import shutil
import struct
import sys
from pathlib import Path


class Seeds:
    def __init__(self, out: Path, harness: str):
        self.dir = out / harness
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.count = 0

    def add(self, data):
        if isinstance(data, str):
            data = data.encode("utf-8")
        (self.dir / hashlib.sha1(data).hexdigest()).write_bytes(data)
        self.count += 1


def dumps(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def golden_chat_cases(ref: Path):
    return json.loads((ref / "golden/chat_templates_golden.json").read_text())["cases"]


def request_seeds(ref: Path, out: Path):
    s = Seeds(out, "request")
    sampling = {"model": "tiny", "max_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
                "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 42,
                "stop": ["\n\n", "</s>"], "stream": True, "stream_options": {"include_usage": True},
                "response_format": {"type": "json_object"}, "ignore_eos": False, "timeout": 30, "user": "u"}
    conversations = [c["variables"] for c in golden_chat_cases(ref)]
    conversations += [{"messages": c["messages"]} for c in json.loads((ref / "golden/chat_golden.json").read_text())]
    seen = set()
    for i, v in enumerate(conversations):
        body = {"messages": v["messages"]}
        for key in ("tools", "add_generation_prompt"):
            if key in v:
                body[key] = v[key]
        if i % 3 == 0:
            body.update(sampling)
            body["logprobs"], body["top_logprobs"] = True, 2
        text = dumps(body)
        if text not in seen:
            seen.add(text)
            s.add(text)
    s.add(dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "input_text", "text": "b"}]}]}))
    # An agent's history replayed (tests/server/data/agent_replay_golden.json), with template variables.
    replay = json.loads((Path(__file__).resolve().parents[1] / "server/data/agent_replay_golden.json").read_text())
    s.add(dumps({"messages": replay["messages"], "tools": replay["tools"], "enable_thinking": False,
                 "reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": True, "documents": [{"a": 1}]}}))
    for prompt in ("def fib(n):", [1, 2, 3], [[4, 5]], ["one"], ""):
        s.add(dumps(dict(sampling, prompt=prompt, logprobs=2, echo=True)))
        s.add(dumps({"prompt": prompt}))
    # The attacks issue 23 reports, cut to the harness's max_len: deep nesting in `tools` and in an extra
    # message field, many keys in one object, invalid UTF-8, wrongly typed flags.
    user = '{"messages":[{"role":"user","content":"hi"'
    s.add(user + '}],"tools":' + "[" * 8000 + "]" * 8000 + "}")
    s.add(user + ',"extra":' + '{"a":' * 2500 + "1" + "}" * 2500 + "}]}")
    s.add("{" + ",".join(f'"k{i}":{i}' for i in range(1500)) + ',"prompt":"x"}')
    s.add(b'{"prompt":"\xff\xfe caf\xc3","stop":["\xc3"],"model":"\x80"}')
    s.add(user + '}],"add_generation_prompt":"x"}')
    s.add('{"prompt":"x","echo":"x"}')
    return s.count


def safetensors_file(tensors, metadata=None):
    """A valid safetensors file with the given (name, dtype, shape) tensors, data all zero."""
    sizes = {"F32": 4, "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "U8": 1, "I8": 1}
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = sizes.get(dtype, 1)
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + bytes(offset)


def safetensors_seeds(ref: Path, out: Path):
    s = Seeds(out, "safetensors")
    for path in sorted(ref.glob("models/**/*.safetensors")):
        with open(path, "rb") as f:
            length = struct.unpack("<Q", f.read(8))[0]
            header_bytes = f.read(length)
            head = json.loads(header_bytes)
        metadata = head.pop("__metadata__", None)
        # The real header over a short data area (the reader must refuse it cleanly)...
        s.add(b"\0" + struct.pack("<Q", length) + header_bytes + bytes(64))
        # ...and the same names, dtypes and ranks, shrunk to a few bytes each, which it accepts.
        small = [(name, t["dtype"], [min(d, 2) for d in t["shape"]]) for name, t in list(head.items())[:24]]
        file = safetensors_file(small, metadata)
        s.add(b"\0" + file)
        index = {"metadata": {"total_size": len(file)}, "weight_map": {name: "model.safetensors" for name, _, _ in small}}
        s.add(b"\1" + dumps(index).encode() + b"\0" + file)
    for path in sorted(ref.glob("models/**/model.safetensors.index.json")):
        s.add(b"\1" + path.read_bytes() + b"\0" + safetensors_file([("a", "F32", [2])]))
    return s.count


def model_config_seeds(ref: Path, out: Path):
    s = Seeds(out, "model_config")
    for path in sorted(ref.glob("models/**/config.json")):
        config = path.read_bytes()
        s.add(config)
        generation = path.with_name("generation_config.json")
        if generation.exists():
            s.add(config + b"\0" + generation.read_bytes())
    return s.count


TOKENIZERS = [("models/tiny-code-qwen2/tokenizer.json", "golden/tokenizer_golden.json"),
              ("golden/tokenizers/sp-legacy/tokenizer.json", "golden/tokenizers/sp-legacy/tokenizer_golden.json"),
              ("golden/tokenizers/sp-metaspace/tokenizer.json", "golden/tokenizers/sp-metaspace/tokenizer_golden.json")]


def tokenizer_seeds(ref: Path, out: Path):
    # Byte 0: tokenizer index (bits 0-1), decode mode (bit 2), special-token flag (bit 3); see the harness.
    s = Seeds(out, "tokenizer")
    for index, (_, golden) in enumerate(TOKENIZERS):
        for case in json.loads((ref / golden).read_text()):
            s.add(bytes([index]) + case["text"].encode("utf-8", "surrogatepass"))
            # ids are stored modulo vocab_size + 16, shifted by 8: write id + 8 to decode exactly `ids`.
            s.add(bytes([index | 4]) + b"".join(struct.pack("<I", i + 8)[:3] for i in case["ids"]))
    return s.count


def jinja_seeds(ref: Path, out: Path):
    s = Seeds(out, "jinja")
    templates = {p.name: p.read_bytes() for p in sorted((ref / "chat_templates").glob("*.jinja"))}
    for source in templates.values():
        s.add(source)
    for case in golden_chat_cases(ref):
        source = templates.get(case["template"])
        if source is not None:
            s.add(source + b"\0" + dumps(case["variables"]).encode())
    # The crashes and hangs issue 23 reports, so every run starts from them.
    for source in ("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}",
                   "{{ 1 ** 9999999999999 }}", "{{ 2 ** 64 ** 64 }}",
                   "{{ 'abcd' * 4611686018427387904 }}", "{{ [1, 2] * 4611686018427387904 }}",
                   "{{ 'x' | center(99999999999) }}", "{{ 'x' | ljust(99999999999) }}",
                   "{% if true %}" * 3000 + "{% endif %}" * 3000,
                   "{% for i in range(2) %}" * 1500 + "{% endfor %}" * 1500,
                   "{{ " + "not " * 8000 + "true }}", "{{ x" + " | string" * 4000 + " }}",
                   "{{ " + "(" * 8000 + "1" + ")" * 8000 + " }}",
                   "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"):
        s.add(source)
    s.add(b"{{ messages }}\0" + b'{"messages":' + b"[" * 9000 + b"]" * 9000 + b"}")
    return s.count


def sse_stop_input(stops, pieces):
    """The byte layout FuzzedDataProvider reads back as these stops and pieces: lengths and the count
    are taken from the end (one byte each, as their ranges are under 256), strings from the front."""
    front, back = b"", [len(stops)]
    for stop in stops:
        front += stop
        back.append(len(stop))
    for piece in pieces:
        back.append(len(piece))
        front += piece
    return front + bytes(reversed(back))


def sse_stop_seeds(out: Path):
    s = Seeds(out, "sse_stop")
    s.add(sse_stop_input([b"</s>"], [b"Hello", b" world<", b"/s", b">tail"]))
    s.add(sse_stop_input([b"\n\n", b"User:"], [b"line one\n", b"\nUser", b": next"]))
    s.add(sse_stop_input([b"abcab", b"bca"], [b"ab", b"cab", b"cabd"]))
    s.add(sse_stop_input([], [b"{\"choices\":[]}", b"data\r\nwith\nbreaks\r"]))
    s.add(sse_stop_input([b"\xe2\x80", b"<|im_end|>"], [b"caf\xc3", b"\xa9 \xe2\x80\x94", b"<|im_", b"end|>"]))
    return s.count


# Formats by their index in toolcall::Format (kNone = 0, kHermes = 1, ... kGemma4 = 13); each seed is
# that byte, a piece size, then a model's answer with calls in the format.
TOOLCALL_SEEDS = [
    (1, b'Let me check.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
        b'<tool_call>{"name": "f", "arguments": {}}</tool_call>'),
    (2, b"<tool_call><function=get_weather><parameter=city>Paris</parameter></function></tool_call>"),
    (4, b"<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value></tool_call>"),
    (5, b'<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}'),
    (6, b'[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'),
    (6, b'[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}'),
    (10, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
         '{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'.encode()),
    (12, b'<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>'),
    (13, b'<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>'),
]


def toolcall_seeds(out: Path):
    s = Seeds(out, "toolcall")
    for fmt, text in TOOLCALL_SEEDS:
        s.add(bytes([fmt, 3]) + text)
    return s.count


def hub_names_input(first, second):
    """FuzzedDataProvider's ConsumeRandomLengthString: a backslash doubles to stand for itself, and a
    backslash before any other byte ends the string."""
    return first.replace(b"\\", b"\\\\") + b"\\;" + second.replace(b"\\", b"\\\\")


def hub_names_seeds(out: Path):
    s = Seeds(out, "hub_names")
    s.add(hub_names_input(b"Qwen/Qwen2.5-0.5B-Instruct@refs/pr/1", b"model-00001-of-00002.safetensors"))
    s.add(hub_names_input(b"mlx-community/Qwen2.5-3B-Instruct-4bit@4147a09fefe65c40379d7c0d92f5045da3f3b9db",
                          b"onnx/model.onnx"))
    s.add(hub_names_input(b"https://huggingface.co/org/name/resolve/main/config.json",
                          b"https://cdn-lfs.hf.co/repos/ab/cd/0123?X-Amz-Signature=1"))
    s.add(hub_names_input(b"http://[::1]:8080/api/models/a/b", b"/org/renamed/resolve/main/tokenizer.json"))
    s.add(hub_names_input(b'W/"67737db604c0103a64b56d66f22ffabc8fe630b1afd5fec73e5156c615b4460a"', b"../x"))
    return s.count


def schema_seeds(out: Path):
    """The structured-output suite's schemas (tests/server/data/schemas) and a few edge shapes."""
    s = Seeds(out, "schema")
    for path in sorted((Path(__file__).resolve().parent.parent / "server" / "data" / "schemas").glob("*.json")):
        s.add(dumps(json.loads(path.read_text())))
    for extra in ({"type": "object"}, True, {"$ref": "#/$defs/a", "$defs": {"a": {"anyOf": [{"type": "null"}, {"type": "array", "items": {"$ref": "#/$defs/a"}}]}}},
                  {"type": "string", "pattern": "^(a|bc)+[^x-z]{2,4}\\d?$"}, {"type": "integer", "minimum": -99, "exclusiveMaximum": 1000}):
        s.add(dumps(extra))
    return s.count


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ref, out = Path(sys.argv[1]), Path(sys.argv[2])
    if not (ref / "golden").is_dir():
        sys.exit(f"make_seeds: no reference data at {ref} (golden/ missing)")
    counts = {"request": request_seeds(ref, out), "safetensors": safetensors_seeds(ref, out),
              "model_config": model_config_seeds(ref, out), "tokenizer": tokenizer_seeds(ref, out),
              "jinja": jinja_seeds(ref, out), "sse_stop": sse_stop_seeds(out),
              "toolcall": toolcall_seeds(out),
              "hub_names": hub_names_seeds(out), "schema": schema_seeds(out)}
    print("seeds: " + ", ".join(f"{name} {n}" for name, n in counts.items()))


if __name__ == "__main__":
    main()
