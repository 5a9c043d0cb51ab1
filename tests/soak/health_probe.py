#!/usr/bin/env python3
"""GET /health every --interval seconds on a fresh connection (as a load balancer would) until stdin
closes, then prints one JSON line: {"samples": [[seconds since start, latency ms, status or error], ...]}.
It runs as its own process so that the soak driver's work does not delay the probes it times."""
import argparse
import http.client
import json
import sys
import threading
import time


def probe(host, port, timeout):
    started = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", "/health")
        res = conn.getresponse()
        body = res.read()
        outcome = res.status if res.status != 200 or json.loads(body).get("status") == "ok" else "bad body"
    except (OSError, http.client.HTTPException, ValueError) as e:
        outcome = type(e).__name__
    finally:
        conn.close()
    return (time.monotonic() - started) * 1000.0, outcome


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--interval", type=float, default=0.1)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--max-seconds", type=float, default=3600, help="stop by itself after this long")
    args = ap.parse_args()
    assert args.host in ("127.0.0.1", "::1", "localhost"), "loopback only"

    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    start = time.monotonic()
    samples = []
    while not stop.is_set() and time.monotonic() - start < args.max_seconds:
        t = time.monotonic() - start
        ms, outcome = probe(args.host, args.port, args.timeout)
        samples.append([round(t, 3), round(ms, 3), outcome])
        stop.wait(max(0.0, args.interval - ms / 1000.0))
    print(json.dumps({"samples": samples}), flush=True)


if __name__ == "__main__":
    main()
