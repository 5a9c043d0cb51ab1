#!/usr/bin/env python3
"""Requests per second and time to first token of `sluice serve` for short prompts (standard library only).

Starts the server (or uses --url), sends --requests streamed completions with --concurrency clients, and
writes a markdown report with the machine, commit and command to perf/results/server_<date>.md.

  python3 perf/server_bench/server_bench.py --sluice build/bin/sluice --model models/tiny-code-qwen2
"""
import argparse
import datetime
import http.client
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from sluice_server_harness import Server  # noqa: E402

PROMPTS = ["def add(a, b):", "import os\n", "class Stack:", "for i in range(10):", "def main():",
           "# read a file\n", "x = [", "def fib(n):"]


def one_request(host, port, endpoint, body):
    """Returns (ttft_s, total_s, completion_tokens) for one streamed request."""
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=120)
    try:
        conn.request("POST", endpoint, body=json.dumps(body), headers={"Content-Type": "application/json"})
        res = conn.getresponse()
        if res.status != 200:
            raise RuntimeError("status %d: %s" % (res.status, res.read()[:200]))
        ttft, tokens, buf = None, 0, b""
        while True:
            chunk = res.read1(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                data = event[6:]
                if data == b"[DONE]":
                    continue
                obj = json.loads(data)
                if obj.get("usage"):
                    tokens = obj["usage"]["completion_tokens"]
                for ch in obj.get("choices", []):
                    piece = ch.get("text") or (ch.get("delta") or {}).get("content")
                    if piece and ttft is None:
                        ttft = time.perf_counter() - t0
        return ttft if ttft is not None else time.perf_counter() - t0, time.perf_counter() - t0, tokens
    finally:
        conn.close()


def run_load(host, port, endpoint, make_body, n, concurrency):
    results, errors, lock = [], [], threading.Lock()
    counter = iter(range(n))

    def worker():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            try:
                r = one_request(host, port, endpoint, make_body(i))
                with lock:
                    results.append(r)
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(str(e))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors, time.perf_counter() - t0


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def machine():
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return "%s, %d logical CPUs, %s %s" % (cpu, os.cpu_count(), platform.system(), platform.release())


def commit():
    try:
        out = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return out.stdout.strip() + (" (uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "bin", "sluice"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "tiny-code-qwen2"))
    ap.add_argument("--url", help="benchmark a running server instead of starting one")
    ap.add_argument("--server-args", default="", help="extra `sluice serve` arguments, space separated")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--endpoint", default="/v1/completions", choices=["/v1/completions", "/v1/chat/completions"])
    ap.add_argument("--out", default=None, help="report path (default perf/results/server_<date>.md)")
    a = ap.parse_args()

    srv = None
    if a.url:
        u = urllib.parse.urlparse(a.url)
        host, port = u.hostname, u.port
    else:
        srv = Server(a.sluice, a.model, *a.server_args.split())
        host, port = srv.host, srv.port

    def make_body(i):
        body = {"max_tokens": a.max_tokens, "temperature": 0.6, "seed": i, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        if a.endpoint == "/v1/completions":
            body["prompt"] = PROMPTS[i % len(PROMPTS)]
        else:
            body["messages"] = [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}]
        return body

    try:
        run_load(host, port, a.endpoint, make_body, min(8, a.requests), 1)  # warm-up
        rows = []
        for conc in sorted({1, a.concurrency}):
            results, errors, wall = run_load(host, port, a.endpoint, make_body, a.requests, conc)
            if not results:
                raise SystemExit("all requests failed: %s" % errors[:3])
            ttfts = [r[0] * 1000 for r in results]
            tokens = sum(r[2] for r in results)
            rows.append({"concurrency": conc, "requests": len(results), "errors": len(errors),
                         "requests_per_s": len(results) / wall, "tokens_per_s": tokens / wall,
                         "ttft_ms_p50": statistics.median(ttfts), "ttft_ms_p90": pct(ttfts, 90),
                         "ttft_ms_max": max(ttfts), "latency_ms_p50": statistics.median(r[1] * 1000 for r in results)})
    finally:
        if srv:
            srv.stop()

    date = datetime.datetime.now().strftime("%Y-%m-%d")
    out = a.out or os.path.join(ROOT, "perf", "results", "server_%s.md" % date)
    command = " ".join([os.path.relpath(sys.argv[0], ROOT) if sys.argv[0].startswith(ROOT) else sys.argv[0]] +
                       sys.argv[1:])
    lines = ["# sluice serve: requests/s and time to first token", "",
             "- date: %s" % datetime.datetime.now().isoformat(timespec="seconds"),
             "- machine: %s" % machine(),
             "- commit: %s" % commit(),
             "- command: `python3 %s`" % command,
             "- server: `sluice serve --model %s %s`" % (os.path.basename(a.model.rstrip("/")), a.server_args),
             "- workload: %d streamed %s requests per row, short code prompts (2-6 tokens), %d tokens each "
             "(ignore_eos), temperature 0.6" % (a.requests, a.endpoint, a.max_tokens), "",
             "| clients | requests | errors | requests/s | tokens/s | TTFT p50 ms | TTFT p90 ms | TTFT max ms | latency p50 ms |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append("| %d | %d | %d | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f |" % (
            r["concurrency"], r["requests"], r["errors"], r["requests_per_s"], r["tokens_per_s"], r["ttft_ms_p50"],
            r["ttft_ms_p90"], r["ttft_ms_max"], r["latency_ms_p50"]))
    lines += ["", "```json", json.dumps(rows, indent=1), "```", ""]
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    print("wrote", out)


if __name__ == "__main__":
    main()
