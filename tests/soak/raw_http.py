"""A small asyncio HTTP/1.x client over a raw socket, for the soak test. Unlike http.client it can send
any bytes (garbage, half a request, a byte at a time), read slowly or not at all, and hang up at any
point, with a FIN or a reset. Standard library only."""
import asyncio
import json
import socket
import struct


class HttpResponse:
    def __init__(self, version, status, headers, body=b""):
        self.version = version    # "HTTP/1.1"
        self.status = status      # int
        self.headers = headers    # lower-case name -> value
        self.body = body

    @property
    def chunked(self):
        return "chunked" in self.headers.get("transfer-encoding", "").lower()


class ProtocolError(Exception):
    """The server's bytes are not a well-formed HTTP response."""


def build_request(method, path, body=b"", headers=None, version="HTTP/1.1", host="127.0.0.1"):
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    elif isinstance(body, str):
        body = body.encode()
    lines = ["%s %s %s" % (method, path, version), "Host: %s" % host]
    hdrs = dict(headers or {})
    if body and "Content-Type" not in hdrs:
        hdrs["Content-Type"] = "application/json"
    if (body or method == "POST") and "Content-Length" not in hdrs and "Transfer-Encoding" not in hdrs:
        hdrs["Content-Length"] = str(len(body))
    lines += ["%s: %s" % kv for kv in hdrs.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Connection:
    """One TCP connection, read through our own buffer with the loop's socket calls (not asyncio streams:
    a stream reader raises a reset before it hands out bytes that arrived ahead of it, and the kernel
    gives those bytes first). `rcvbuf` shrinks the receive buffer, so a slow reader fills it sooner."""

    def __init__(self, sock):
        self.sock = sock
        self.loop = asyncio.get_running_loop()
        self.buf = bytearray()  # appends and front deletions in amortized constant time
        self.eof = False

    @classmethod
    async def open(cls, host, port, rcvbuf=None, mss=None):
        """`mss` announces a small segment size: the server's kernel then sizes its send buffer from it
        (on loopback it is otherwise ~2.6 MB), so what a client leaves unread piles up in the server."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            if rcvbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            if mss:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
            sock.setblocking(False)
            await asyncio.get_running_loop().sock_connect(sock, (host, port))
        except BaseException:
            sock.close()
            raise
        return cls(sock)

    async def send(self, data):
        await self.loop.sock_sendall(self.sock, data)

    async def send_slowly(self, data, delay, step=1):
        for i in range(0, len(data), step):
            await self.send(data[i:i + step])
            await asyncio.sleep(delay)

    async def _fill(self, size=1 << 16):
        data = await self.loop.sock_recv(self.sock, size)
        # sock_recv returns at once, without yielding, while bytes are waiting: a long stream read in
        # a loop would hold the event loop (and every other client) until it ends.
        await asyncio.sleep(0)
        if not data:
            self.eof = True
        self.buf += data
        return len(data)

    def _take(self, n):
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def read_until(self, sep, max_bytes=1 << 20):
        start = 0
        while True:
            i = self.buf.find(sep, start)
            if i >= 0:
                return self._take(i + len(sep))
            if len(self.buf) > max_bytes:
                raise ProtocolError("no %r within %d bytes" % (sep, max_bytes))
            start = max(0, len(self.buf) - len(sep) + 1)
            if self.eof or not await self._fill():
                raise asyncio.IncompleteReadError(bytes(self.buf), None)

    async def read_exactly(self, n):
        while len(self.buf) < n:
            if self.eof or not await self._fill():
                raise asyncio.IncompleteReadError(bytes(self.buf), n)
        return self._take(n)

    async def read_some(self, size=1 << 16):
        """Up to `size` bytes (b"" at the end)."""
        if not self.buf and not self.eof:
            await self._fill(size)
        return self._take(size)

    async def read_to_eof(self):
        while not self.eof:
            await self._fill()
        return self._take(len(self.buf))

    async def read_head(self):
        head = await self.read_until(b"\r\n\r\n", max_bytes=1 << 16)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ProtocolError("bad status line %r" % lines[0][:80])
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        return HttpResponse(parts[0], int(parts[1]), headers)

    async def read_chunks(self):
        """Yields the payload of each chunk of a chunked body; stops after the last chunk."""
        while True:
            size_line = await self.read_until(b"\r\n", max_bytes=64)
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError as e:
                raise ProtocolError("bad chunk size %r" % size_line[:40]) from e
            if size == 0:
                await self.read_until(b"\r\n", max_bytes=64)  # no trailers expected
                return
            data = await self.read_exactly(size + 2)
            if data[-2:] != b"\r\n":
                raise ProtocolError("chunk not followed by CRLF")
            yield data[:-2]

    async def read_body(self, res):
        if res.chunked:
            res.body = b"".join([c async for c in self.read_chunks()])
        elif "content-length" in res.headers:
            res.body = await self.read_exactly(int(res.headers["content-length"]))
        else:
            res.body = await self.read_to_eof()  # delimited by the close (HTTP/1.0)
        return res

    async def read_response(self):
        return await self.read_body(await self.read_head())

    def close(self):
        self.sock.close()

    def reset(self):
        """Hangs up with a TCP reset (SO_LINGER 0) instead of a FIN."""
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.sock.close()


def sse_events(data):
    """Splits an SSE body into its `data:` payloads (str). Raises ProtocolError on anything else and
    UnicodeDecodeError on bytes that are not UTF-8. A trailing partial event is returned as well."""
    events = []
    for block in data.split(b"\n\n"):
        if not block:
            continue
        for line in block.decode("utf-8").split("\n"):
            if not line.startswith("data: "):
                raise ProtocolError("SSE line without data: %r" % line[:80])
            events.append(line[6:])
    return events
