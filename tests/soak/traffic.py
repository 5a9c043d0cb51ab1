"""The soak test's request kinds: each is a coroutine that plays one client doing one thing to the server
(a normal completion, a hang-up mid-stream, a malformed or oversized request, a slow writer or reader)
and checks what came back. It returns a short label (the status, or what the connection did) or raises
Unexpected when the server's answer is wrong. Loopback only: every connection goes to the target."""
import asyncio
import json
import random

from answers import Unexpected, check_generation, expect_error, utf8_json
from raw_http import Connection, build_request

GENERATE_ROUTES = ("/v1/completions", "/v1/chat/completions")
JSON_ROUTES = GENERATE_ROUTES + ("/tokenize", "/detokenize", "/apply-template")

SNIPPETS = ["def add(a, b):", "import os\n", "class Stack:\n    def __init__(self):", "for i in range(10):",
            "# sort a list\n", "fn main() {", "SELECT * FROM", "héllo wörld, 你好 🙂", "while True:\n    ",
            "return x * 2", "#include <stdio.h>\n", "const x = [1, 2, 3].map("]
SYSTEM = "You are a careful assistant that writes short, correct Python. " * 8  # shared prefix: cache reuse


class Target:
    """Where the server listens and the limits it was started with."""

    def __init__(self, host, port, body_limit, read_timeout, idle_timeout, write_timeout, ctx_size):
        assert host in ("127.0.0.1", "::1", "localhost"), "the soak test talks to loopback only"
        self.host, self.port = host, port
        self.body_limit, self.ctx_size = body_limit, ctx_size
        self.read_timeout, self.idle_timeout, self.write_timeout = read_timeout, idle_timeout, write_timeout

    async def connect(self, rcvbuf=None, mss=None):
        return await Connection.open(self.host, self.port, rcvbuf=rcvbuf, mss=mss)


# --- request bodies ------------------------------------------------------------------------------------

def prompt_text(rng):
    text = "".join(rng.choice(SNIPPETS) for _ in range(rng.randint(1, 6)))
    if rng.random() < 0.1:
        text = text * rng.randint(5, 15)  # a long prompt (a few hundred tokens): several prefill chunks
    return text


def generation_body(rng, chat, stream, max_tokens=None, long=False):
    body = {"max_tokens": max_tokens or rng.randint(1, 48), "temperature": rng.choice([0, 0.7, 1.0]),
            "seed": rng.randint(0, 1 << 30)}
    if chat:
        msgs = [{"role": "user", "content": prompt_text(rng)}]
        if rng.random() < 0.5:
            msgs.insert(0, {"role": "system", "content": SYSTEM})
        body["messages"] = msgs
    else:
        body["prompt"] = (SYSTEM if rng.random() < 0.3 else "") + prompt_text(rng)
        if rng.random() < 0.2:
            body["logprobs"] = rng.randint(0, 5)
        if rng.random() < 0.1:
            body["echo"] = True
    if rng.random() < 0.2:
        body["stop"] = rng.choice(["\n", ["):", "return"], "}"])
    if long:
        body["ignore_eos"] = True
    if stream:
        body["stream"] = True
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    return body


async def exchange(target, raw, read=True):
    conn = await target.connect()
    try:
        await conn.send(raw)
        return await conn.read_response() if read else None
    finally:
        conn.close()


# --- the kinds -------------------------------------------------------------------------------------------

async def generation(target, rng):
    chat, stream = rng.random() < 0.5, rng.random() < 0.5
    path = rng.choice(["/v1/chat/completions", "/chat/completions"] if chat else ["/v1/completions", "/completions"])
    res = await exchange(target, build_request("POST", path, generation_body(rng, chat, stream)))
    return check_generation(res, chat, stream)


async def light(target, rng):
    """The cheap routes, several on one keep-alive connection (sometimes pipelined)."""
    reqs = []
    for _ in range(rng.randint(1, 5)):
        choice = rng.randrange(6)
        if choice == 0:
            reqs.append((build_request("GET", "/health"), "health"))
        elif choice == 1:
            reqs.append((build_request("GET", "/v1/models"), "models"))
        elif choice == 2:
            reqs.append((build_request("GET", "/metrics"), "metrics"))
        elif choice == 3:
            reqs.append((build_request("POST", "/tokenize", {"content": prompt_text(rng), "with_pieces": True}), "tokenize"))
        elif choice == 4:
            reqs.append((build_request("POST", "/detokenize", {"tokens": [rng.randrange(1, 1000) for _ in range(20)]}),
                         "detokenize"))
        else:
            reqs.append((build_request("POST", "/apply-template", {"messages": [{"role": "user", "content": prompt_text(rng)}]}),
                         "apply-template"))
    conn = await target.connect()
    try:
        if rng.random() < 0.3:
            await conn.send(b"".join(r for r, _ in reqs))  # pipelined
            for _, what in reqs:
                check_light(await conn.read_response(), what)
        else:
            for raw, what in reqs:
                await conn.send(raw)
                check_light(await conn.read_response(), what)
    finally:
        conn.close()
    return "200"


def check_light(res, what):
    if res.status != 200:
        raise Unexpected("%s answered %d: %r" % (what, res.status, res.body[:160]))
    if what != "metrics":
        utf8_json(res.body, what)


async def stream_disconnect(target, rng):
    """A long stream the client hangs up on after a few events (FIN or reset)."""
    chat = rng.random() < 0.5
    body = generation_body(rng, chat, True, max_tokens=rng.randint(100, 1500), long=True)
    conn = await target.connect()
    try:
        await conn.send(build_request("POST", GENERATE_ROUTES[chat], body))
        res = await conn.read_head()
        if res.status != 200:
            await conn.read_body(res)
            return check_generation(res, chat, True)
        want = rng.randint(0, 20)
        seen = 0
        async for chunk in conn.read_chunks():
            seen += chunk.count(b"\n\n")
            if seen >= want:
                break
    finally:
        (conn.reset if rng.random() < 0.5 else conn.close)()
    return "hung up"


async def wait_disconnect(target, rng):
    """A plain (not streamed) long request the client hangs up on before the answer."""
    chat = rng.random() < 0.5
    body = generation_body(rng, chat, False, max_tokens=rng.randint(200, 1500), long=True)
    conn = await target.connect()
    try:
        await conn.send(build_request("POST", GENERATE_ROUTES[chat], body))
        await asyncio.sleep(rng.uniform(0, 0.5))
    finally:
        (conn.reset if rng.random() < 0.5 else conn.close)()
    return "hung up"


MALFORMED = [b"{oops", b'{"prompt": "x"', b"[1, 2", b'{"prompt": "x",}', b"", b"null", b"[]", b"42", b'"text"',
             b'{"prompt": "x" "max_tokens": 3}', b"{'prompt': 'x'}", b'{"prompt": "\\x"}', b"\xff\xfe{}",
             b'{"prompt": "x"} trailing', b'{"messages": [}', b"\x00" * 16, b'{"a":' * 3]


async def malformed_json(target, rng):
    if rng.random() < 0.4:  # a valid body cut short
        full = json.dumps(generation_body(rng, rng.random() < 0.5, False)).encode()
        body = full[:rng.randrange(0, len(full) - 1)]
    else:
        body = rng.choice(MALFORMED)
    path = rng.choice(JSON_ROUTES)
    res = await exchange(target, build_request("POST", path, body, {"Content-Type": "application/json",
                                                                     "Content-Length": str(len(body))}))
    return expect_error(res, (400,))


# (route, field, wrong value, the param the error should name)
WRONG_TYPES = [
    ("/v1/completions", "max_tokens", "ten", "max_tokens"), ("/v1/completions", "temperature", "hot", "temperature"),
    ("/v1/completions", "stream", "yes", "stream"), ("/v1/completions", "stop", 5, "stop"),
    ("/v1/completions", "n", 17, "n"), ("/v1/completions", "seed", 1.5, "seed"),
    ("/v1/completions", "prompt", [99999999], "prompt"), ("/v1/completions", "prompt", {"a": 1}, "prompt"),
    ("/v1/completions", "max_tokens", -5, "max_tokens"), ("/v1/completions", "top_p", 7, "top_p"),
    ("/v1/completions", "echo", "x", "echo"), ("/v1/completions", "logprobs", 99, "logprobs"),
    ("/v1/chat/completions", "messages", "nope", "messages"),
    ("/v1/chat/completions", "messages", [{"role": "robot", "content": "x"}], "messages[0].role"),
    ("/v1/chat/completions", "messages", [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}],
     "messages[0].tool_calls[0].function.arguments"),
    ("/v1/chat/completions", "chat_template_kwargs", {"messages": []}, "chat_template_kwargs.messages"),
    ("/v1/chat/completions", "messages", [], "messages"), ("/v1/chat/completions", "tools", {"x": 1}, "tools"),
    ("/v1/chat/completions", "add_generation_prompt", "x", "add_generation_prompt"),
    ("/v1/chat/completions", "top_logprobs", 50, "top_logprobs"),
    ("/v1/chat/completions", "response_format", {"type": "json_schema"}, "response_format.json_schema"),
    ("/v1/chat/completions", "response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}},
     "response_format.json_schema.schema"),
    ("/v1/chat/completions", "tool_choice", "required", "tool_choice"),
    ("/tokenize", "content", 5, "content"), ("/detokenize", "tokens", "abc", "tokens"),
]


async def wrong_types(target, rng):
    path, field, value, param = rng.choice(WRONG_TYPES)
    if path == "/v1/completions":
        body = {"prompt": "def f():", "max_tokens": 4}
    elif path == "/v1/chat/completions":
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    else:
        body = {}
    body[field] = value
    res = await exchange(target, build_request("POST", path, body))
    return expect_error(res, (400,), param=param)


async def context_overflow(target, rng):
    """A prompt of more tokens than the context holds."""
    n = target.ctx_size + rng.randint(1, 100)
    res = await exchange(target, build_request("POST", "/v1/completions", {"prompt": [rng.randrange(1, 1000) for _ in range(n)]}))
    return expect_error(res, (400,), param="prompt", code="context_length_exceeded")


def nested(depth, rng):
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    return opener * depth + "1" + closer * depth


async def deep_json(target, rng):
    """JSON nested far deeper than any real request: at the top, in a field, or in a chat's tools."""
    depth = rng.choice([2000, 20000, 100000, 200000])
    where = rng.randrange(3)
    if where == 0:
        path, body = rng.choice(JSON_ROUTES), nested(depth, rng)
    elif where == 1:
        path, body = "/v1/completions", '{"prompt": "x", "max_tokens": 1, "extra": %s}' % nested(depth, rng)
    else:
        path, body = "/v1/chat/completions", ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, '
                                              '"tools": [%s]}' % nested(depth, rng))
    res = await exchange_tolerant(target, build_request("POST", path, body.encode()))
    return expect_error(res, (400, 413))


async def many_keys(target, rng):
    """An object of tens of thousands of distinct keys — at the top of a completion request, or in a chat's
    tools or message (where it becomes a template value): refused (400) or served, but never a stall."""
    n = rng.choice([5000, 20000, 50000])
    keys = ",".join('"k%d": %d' % (i, i) for i in range(n))
    where = rng.randrange(3)
    if where == 0:
        path, body = "/v1/completions", '{"prompt": "x", "max_tokens": 1, %s}' % keys
    elif where == 1:
        path, body = "/v1/chat/completions", ('{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, '
                                              '"tools": [{"type": "function", "function": {"name": "f", '
                                              '"parameters": {%s}}}]}' % keys)
    else:
        path, body = "/v1/chat/completions", ('{"messages": [{"role": "user", "content": "hi", "extra": {%s}}], '
                                              '"max_tokens": 1}' % keys)
    res = await exchange_tolerant(target, build_request("POST", path, body.encode()))
    if res.status == 200:
        return check_generation(res, where > 0, False)
    return expect_error(res, (400, 413))


async def oversized_body(target, rng):
    """A Content-Length over --body-limit: 413 as soon as the header is read."""
    size = target.body_limit + rng.randint(1, target.body_limit)
    head = build_request("POST", rng.choice(JSON_ROUTES), b"", {"Content-Type": "application/json",
                                                                "Content-Length": str(size)})
    conn = await target.connect()
    try:
        try:
            await conn.send(head + b"[" * rng.randint(0, 1 << 16))
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before taking it all: the answer is still there
        res = await conn.read_response()
    finally:
        conn.close()
    return expect_error(res, (413,), code="payload_too_large")


async def oversized_chunked(target, rng):
    """A chunked body that grows past --body-limit: 413, or a reset if the server closed while we sent."""
    head = build_request("POST", "/v1/completions", b"", {"Content-Type": "application/json",
                                                           "Transfer-Encoding": "chunked"})
    conn = await target.connect()
    try:
        await conn.send(head)
        piece = b"a" * 65536
        sent = 0
        try:
            while sent <= target.body_limit + 65536:
                await conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                sent += len(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass
        try:
            res = await conn.read_response()
        except (ConnectionResetError, asyncio.IncompleteReadError):
            return "reset"
    finally:
        conn.close()
    return expect_error(res, (413,))


async def big_header(target, rng):
    """A header section over the server's 64 KiB header limit: 431."""
    raw = build_request("GET", "/health", b"", {"X-Filler": "a" * rng.randint(70000, 120000)})
    return expect_error(await exchange_tolerant(target, raw), (431,))


async def long_url(target, rng):
    """A request target over the header limit: 414."""
    raw = build_request("GET", "/v1/" + "a" * rng.randint(70000, 120000), b"")
    return expect_error(await exchange_tolerant(target, raw), (414,))


async def exchange_tolerant(target, raw):
    """Sends everything it can and reads the answer, even when the server answered before reading it all."""
    conn = await target.connect()
    try:
        try:
            await conn.send(raw)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return await conn.read_response()
    finally:
        conn.close()


async def garbage(target, rng):
    """Bytes that are not HTTP (the first is no method character, nor the CR/LF a parser may skip): 400."""
    data = bytes([rng.choice([b for b in range(256) if b < 32 and b not in (10, 13) or b >= 127])])
    data += bytes(rng.randrange(256) for _ in range(rng.randint(0, 3000))) + b"\r\n\r\n"
    return expect_error(await exchange_tolerant(target, data), (400,))


async def invalid_utf8(target, rng):
    """Bytes that are not UTF-8 inside a JSON string: refused, or answered in valid UTF-8 (echo included)."""
    bad = rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80abc"])
    path = rng.choice(["/v1/completions", "/tokenize"])
    if path == "/tokenize":
        body = b'{"content": "ab' + bad + b'cd", "with_pieces": true}'
    else:
        body = b'{"prompt": "def f' + bad + b'():", "max_tokens": 4, "echo": true}'
    res = await exchange(target, build_request("POST", path, body))
    if res.status == 200:
        utf8_json(res.body)
        return "200"
    return expect_error(res, (400,))


async def http10_stream(target, rng):
    """A streamed completion over HTTP/1.0: no chunked encoding; the stream ends when the server closes."""
    body = generation_body(rng, False, True)
    res = await exchange(target, build_request("POST", "/v1/completions", body, version="HTTP/1.0"))
    if res.status == 200 and res.chunked:
        raise Unexpected("a chunked answer to an HTTP/1.0 request")
    return check_generation(res, False, True)


async def bad_route(target, rng):
    if rng.random() < 0.5:
        return expect_error(await exchange(target, build_request("GET", "/v1/nothing/%d" % rng.randrange(1000))), (404,))
    method, path = rng.choice([("GET", "/v1/completions"), ("DELETE", "/health"), ("PUT", "/v1/models")])
    return expect_error(await exchange(target, build_request(method, path)), (405,))


async def slow_writer(target, rng):
    """A request sent a byte at a time, finished well inside the read timeout: answered normally."""
    body = json.dumps({"content": prompt_text(rng)[:40]}).encode()
    raw = build_request("POST", "/tokenize", body)
    head_len = raw.index(b"\r\n\r\n") + 4
    conn = await target.connect()
    try:
        await conn.send_slowly(raw[:head_len], delay=0, step=rng.randint(1, 16))
        await conn.send_slowly(raw[head_len:], delay=target.read_timeout * 0.4 / len(body))
        res = await conn.read_response()
    finally:
        conn.close()
    check_light(res, "tokenize")
    return "200"


async def slow_writer_stall(target, rng):
    """Half a request, then nothing: the server must close the connection once its timeout passes (the read
    timeout for a body, the idle timeout for a header), answering nothing or an error."""
    raw = build_request("POST", "/v1/completions", {"prompt": "def f():", "max_tokens": 4})
    head_len = raw.index(b"\r\n\r\n") + 4
    in_header = rng.random() < 0.3
    cut = rng.randint(1, head_len - 3) if in_header else rng.randint(head_len, len(raw) - 1)
    limit = target.idle_timeout if in_header else target.read_timeout
    loop = asyncio.get_running_loop()
    conn = await target.connect()
    try:
        started = loop.time()
        await conn.send_slowly(raw[:cut], delay=0.05 if in_header else 0, step=max(1, cut // 20))
        try:
            data = await asyncio.wait_for(conn.read_to_eof(), limit + 15)
        except asyncio.TimeoutError:
            raise Unexpected("a stalled request was still open %.0f s after the %d s timeout" % (15, limit))
        except ConnectionResetError:
            data = b""
        waited = loop.time() - started
    finally:
        conn.close()
    if waited < limit - 1:
        raise Unexpected("a stalled request was closed after %.1f s, before the %d s timeout" % (waited, limit))
    if data:
        try:
            head, _, body = data.partition(b"\r\n\r\n")
            status = int(head.split(b" ")[1])
        except (IndexError, ValueError):
            raise Unexpected("a stalled request got bytes that are not a response: %r" % data[:80])
        if status not in (400, 408):
            raise Unexpected("a stalled request got status %d" % status)
        return "closed %d" % status
    return "closed"


async def unread_stream(target, body, wait):
    """Sends a streamed request, reads nothing for `wait` seconds (a small receive buffer and segment
    size, so the unread bytes pile up in the server), then reads what is left: the server gave up on the
    connection ("cut"), or managed to send the whole stream ("completed"), or is still sending."""
    conn = await target.connect(rcvbuf=4096, mss=536)
    try:
        await conn.send(build_request("POST", body.pop("path"), body))
        await asyncio.sleep(wait)
        try:
            data = await asyncio.wait_for(conn.read_to_eof(), 60)
        except ConnectionResetError:
            return "cut (reset)"
        except asyncio.TimeoutError:
            # Still streaming to us now that we read (say the request waited long in the queue): fine.
            # A server that never gives up on unread streams fails "abuse paths exercised" instead.
            return "still streaming"
    finally:
        conn.close()
    if not data.startswith(b"HTTP/1.1 "):
        return "cut before the head" if not data else "cut"
    if data.startswith(b"HTTP/1.1 503"):
        return "503"
    return "completed" if b"data: [DONE]" in data else "cut"


async def slow_reader_queue(target, rng):
    """A long stream of large events (20 log-probabilities a token) nobody reads: the server's queue for
    the connection (4 MiB) fills before its write timeout and the generation is cancelled."""
    body = {"path": "/v1/chat/completions", "messages": [{"role": "user", "content": prompt_text(rng)[:60]}],
            "max_tokens": target.ctx_size - 64, "ignore_eos": True, "logprobs": True, "top_logprobs": 20,
            "stream": True}
    return await unread_stream(target, body, wait=min(45, target.write_timeout + 15))


async def slow_reader_stall(target, rng):
    """A stream of ~0.5-1 MB nobody reads: more than the kernel buffers take, less than the queue limit, so
    one write blocks and the write timeout ends the connection."""
    body = {"path": "/v1/completions", "prompt": prompt_text(rng)[:60], "max_tokens": rng.randint(1500, 2500),
            "ignore_eos": True, "logprobs": 5, "stream": True}
    return await unread_stream(target, body, wait=target.write_timeout + 10)


async def slow_reader_trickle(target, rng):
    """A stream read a little at a time: served to the end or cut, never a stall."""
    body = generation_body(rng, False, True, max_tokens=rng.randint(100, 300), long=True)
    body["logprobs"] = 5
    conn = await target.connect(rcvbuf=4096)
    try:
        await conn.send(build_request("POST", "/v1/completions", body))
        data = b""
        while True:
            try:
                piece = await conn.read_some(1024)
            except ConnectionResetError:
                return "cut (reset)"
            if not piece:
                break
            data += piece
            if data.endswith(b"0\r\n\r\n") and b"data: [DONE]" in data:
                break
            await asyncio.sleep(0.1)
    finally:
        conn.close()
    return "completed" if b"data: [DONE]" in data else "cut"


# name -> (coroutine, weight, time bound in seconds beyond the target's timeouts). The bounds are a safety
# net, generous because on a loaded machine this driver's own event loop falls behind (its lag is reported).
KINDS = {
    "generation": (generation, 30, 120),
    "light": (light, 10, 60),
    "stream_disconnect": (stream_disconnect, 8, 60),
    "wait_disconnect": (wait_disconnect, 4, 30),
    "malformed_json": (malformed_json, 6, 60),
    "wrong_types": (wrong_types, 6, 60),
    "context_overflow": (context_overflow, 2, 60),
    "deep_json": (deep_json, 3, 60),
    "many_keys": (many_keys, 2, 120),
    "oversized_body": (oversized_body, 3, 60),
    "oversized_chunked": (oversized_chunked, 1, 60),
    "big_header": (big_header, 2, 60),
    "long_url": (long_url, 2, 60),
    "garbage": (garbage, 3, 60),
    "invalid_utf8": (invalid_utf8, 2, 60),
    "http10_stream": (http10_stream, 2, 120),
    "bad_route": (bad_route, 2, 60),
    "slow_writer": (slow_writer, 2, 60),
    "slow_writer_stall": (slow_writer_stall, 2, 60),
    "slow_reader_queue": (slow_reader_queue, 1, 240),
    "slow_reader_stall": (slow_reader_stall, 1, 240),
    "slow_reader_trickle": (slow_reader_trickle, 2, 90),
}


def pick(rng, names):
    weights = [KINDS[n][1] for n in names]
    return rng.choices(names, weights)[0]


def new_rng(seed, worker):
    return random.Random(seed * 1000003 + worker)
