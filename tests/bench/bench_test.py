#!/usr/bin/env python3
"""End-to-end checks of `sluice bench` (run by CTest, one case per test; see CMakeLists.txt)."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from sluice_server_harness import Server  # noqa: E402

ROW_FIELDS = ["backend", "backend_options", "device", "backend_description", "gpu_layers", "threads", "kv_codec", "expert_store", "expert_budget_mb",
              "ctx", "gen", "reps", "placement", "kv_recent", "kv_recent_bytes", "ttft_ms", "ttft_ms_min", "ttft_ms_max", "prefill_tps", "prefill_tps_min", "prefill_tps_max",
              "decode_tps", "decode_tps_min", "decode_tps_max", "peak_rss_mb", "device_mem_mb", "kv_bytes", "kv_bytes_per_token", "decode_bytes_per_token", "decode_gbs",
              "expert_bytes_read_per_token", "hit_rate", "weight_mb"]
MACHINE_FIELDS = ["cpu", "cores", "memory_mb", "devices", "commit", "date", "loadavg", "loadavg_end", "kernel", "hostname"]
MODEL_FIELDS = ["name", "architecture", "layers", "kv_heads", "head_dim", "vocab_size", "experts", "weight_mb"]


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)

    def run(self, *extra, expect=0, timeout=240):
        cmd = [self.args.sluice, "bench", *extra]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if expect is not None and p.returncode != expect:
            raise AssertionError("%s: exit %d, expected %d\nstdout:\n%s\nstderr:\n%s" % (" ".join(cmd), p.returncode, expect, p.stdout, p.stderr))
        return p

    def matrix(self, name, *extra):
        out = os.path.join(self.work, name)
        p = self.run("--model", self.args.model, "--backends", "cpu", "--threads", "2", "--gen", "4", "--reps", "1",
                     "--json-out", out, *extra)
        with open(out) as f:
            return json.load(f), p


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def tensor_bytes(model_dir):
    """Each tensor's bytes, from the safetensors headers."""
    sizes = {}
    for name in sorted(os.listdir(model_dir)):
        if name.endswith(".safetensors"):
            with open(os.path.join(model_dir, name), "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                for k, v in json.loads(f.read(n)).items():
                    if k != "__metadata__":
                        sizes[k] = v["data_offsets"][1] - v["data_offsets"][0]
    return sizes


def decode_weight_bytes(model_dir):
    """The weight bytes a decode step reads, worked out here from the files: all but an untied
    embedding table (a row is looked up), routed experts at top-k of n."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    sizes = tensor_bytes(model_dir)
    tied = cfg.get("tie_word_embeddings", False)
    total = sum(sizes.values())
    lookup = sum(v for k, v in sizes.items() if "embed_tokens" in k and not tied)
    experts = sum(v for k, v in sizes.items() if ".experts." in k or ".switch_mlp." in k)  # HF or MLX layout
    n, top_k = cfg.get("num_experts", 0), cfg.get("num_experts_per_tok", 0)
    return total - lookup - experts + (experts * top_k // n if n else 0)


def check_decode_bandwidth(doc, model_dir):
    """Each row's decode bytes (weights + the cache up to the average decoded position) and their rate;
    CPU rows against the read bandwidth measured for their thread count."""
    weights = decode_weight_bytes(model_dir)
    measured = {m["threads"]: m["read_gbs"] for m in doc["machine"].get("memory_bandwidth", [])}
    for r in doc["rows"]:
        want = weights + r["kv_bytes_per_token"] * (r["ctx"] + r["gen"] / 2)
        check(abs(r["decode_bytes_per_token"] - want) <= 1, "decode bytes %r, worked out %r" % (r["decode_bytes_per_token"], want))
        gbs = want * r["decode_tps"] / 1e9
        check(abs(r["decode_gbs"] - gbs) <= 1e-6 * gbs, "decode GB/s %r, worked out %r" % (r["decode_gbs"], gbs))
        check(r["threads"] in measured and measured[r["threads"]] > 0.1, "read bandwidth measured for %r threads: %r" % (r["threads"], measured))
        check(abs(r["decode_read_fraction"] - gbs / measured[r["threads"]]) <= 1e-6, "fraction %r" % r["decode_read_fraction"])


def case_matrix(b):
    doc, p = b.matrix("smoke.json", "--kv-codecs", "f16,q8", "--ctx", "16,32")
    for k in MACHINE_FIELDS:
        check(k in doc["machine"], "machine field %s missing" % k)
    m = doc["machine"]
    check(m["cores"] >= 1 and m["memory_mb"] > 0 and m["cpu"], "machine: %r" % m)
    check(re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", m["commit"]), "commit %r" % m["commit"])
    check(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", m["date"]), "date %r" % m["date"])
    check(any(d["backend"] == "cpu" for d in m["devices"]), "the CPU backend's device is listed")
    model = doc["model"]
    for k in MODEL_FIELDS:
        check(k in model, "model field %s missing" % k)
    check(model["name"] == "tiny-code-qwen2" and model["architecture"] == "qwen2" and model["experts"] == 0, "model %r" % model)
    rows = doc["rows"]
    check([(r["kv_codec"], r["ctx"]) for r in rows] == [("f16", 16), ("f16", 32), ("q8", 16), ("q8", 32)], "row order: %r" % rows)
    for r in rows:
        check("error" not in r, "row failed: %r" % r)
        for k in ROW_FIELDS:
            check(k in r, "row field %s missing: %r" % (k, r))
        check(r["backend"] == "cpu" and r["device"] and r["threads"] == 2 and r["gen"] == 4 and r["reps"] == 1, "row identity %r" % r)
        check(r["placement"].startswith("cpu"), "every layer on the CPU: %r" % r["placement"])
        check(r["kv_recent"] >= 0 and r["kv_recent_bytes"] >= 0 and (r["kv_recent"] > 0) == (r["kv_recent_bytes"] > 0),
              "recent window %r / %r" % (r["kv_recent"], r["kv_recent_bytes"]))
        for k in ("ttft_ms", "prefill_tps", "decode_tps"):
            check(r[k] > 0 and r[k + "_min"] <= r[k] <= r[k + "_max"], "%s: %r" % (k, r))
        # One rep: prefill throughput is exactly the prompt over the time to the first token.
        check(abs(r["prefill_tps"] - r["ctx"] / (r["ttft_ms"] / 1000)) < 1e-6 * r["prefill_tps"], "prefill_tps vs ttft %r" % r)
        check(10 < r["peak_rss_mb"] < 4096, "peak RSS %r" % r["peak_rss_mb"])
        check(r["device_mem_mb"] is None, "the CPU backend has no device memory of its own")
        check(r["expert_bytes_read_per_token"] is None and r["hit_rate"] is None and r["expert_budget_mb"] is None, "dense model: no expert figures")
        check(r["kv_bytes"] == int(r["kv_bytes_per_token"] * (r["ctx"] + r["gen"])), "kv_bytes = per token x positions: %r" % r)
        check(abs(r["weight_mb"] - model["weight_mb"]) < 0.01, "weights %r vs %r" % (r["weight_mb"], model["weight_mb"]))
    # KV bytes per token from the model's shape: K and V, every layer and KV head, head_dim values.
    values = 2 * model["layers"] * model["kv_heads"] * model["head_dim"]
    f16 = [r for r in rows if r["kv_codec"] == "f16"]
    q8 = [r for r in rows if r["kv_codec"] == "q8"]
    check(all(r["kv_bytes_per_token"] == values * 2 for r in f16), "f16 is 2 bytes a value")
    check(all(r["kv_bytes_per_token"] == values * 34 / 32 for r in q8), "q8 is 34 bytes per block of 32 values")
    check(f16[1]["kv_bytes"] > f16[0]["kv_bytes"], "a longer context holds more KV bytes")
    # The table on stdout: a header and one line per row, and progress on stderr.
    lines = [l for l in p.stdout.splitlines() if l.startswith("| cpu |")]
    check(len(lines) == 4, "markdown rows:\n" + p.stdout)
    check_decode_bandwidth(doc, b.args.model)
    for line, r in zip(lines, rows):
        check(" (%.0f%%) |" % (100 * r["decode_read_fraction"]) in line, "the share of the read bandwidth in %s" % line)
    check("[4/4]" in p.stderr and "decode" in p.stderr, "progress on stderr:\n" + p.stderr)


def case_lists(b):
    """List values that contain commas stay whole: a K/V codec pair."""
    doc, _ = b.matrix("lists.json", "--kv-codecs", "f16,k=q8,v=f16", "--ctx", "8")
    rows = doc["rows"]
    check([r["kv_codec"] for r in rows] == ["f16", "k=q8,v=f16"], "codecs %r" % [r.get("kv_codec") for r in rows])
    m = doc["model"]
    half = m["layers"] * m["kv_heads"] * m["head_dim"]  # K values (or V values) per token
    check(rows[1]["kv_bytes_per_token"] == half * 34 / 32 + half * 2, "K in q8, V in f16: %r" % rows[1])


def case_compare(b):
    a_path, b_path = os.path.join(b.work, "a.json"), os.path.join(b.work, "b.json")
    a, _ = b.matrix("a.json", "--kv-codecs", "f16", "--ctx", "16,32")
    bb, _ = b.matrix("b.json", "--kv-codecs", "f16;q8", "--ctx", "32")
    p = b.run("--compare", a_path, b_path)
    out = p.stdout
    check("A: " + a_path in out and "B: " + b_path in out, out)
    matched = [l for l in out.splitlines() if l.startswith("| cpu | all | 2 | f16 | resident | 32 |")]
    check(len(matched) == 1, "the common row is matched:\n" + out)
    ra = next(r for r in a["rows"] if r["ctx"] == 32)
    rb = next(r for r in bb["rows"] if r["ctx"] == 32 and r["kv_codec"] == "f16")
    want = "%.2f×" % (rb["decode_tps"] / ra["decode_tps"])
    check(want in matched[0], "decode ratio %s in %s" % (want, matched[0]))
    check(re.search(r"\| cpu \| all \| 2 \| f16 \| resident \| 16 \| only in A", out), "row only in A:\n" + out)
    check(re.search(r"\| cpu \| all \| 2 \| q8 \| resident \| 32 \| only in B", out), "row only in B:\n" + out)
    # A file that is not a result file is a runtime error naming it.
    bad = os.path.join(b.work, "bad.json")
    with open(bad, "w") as f:
        f.write('{"x": 1}')
    p = b.run("--compare", a_path, bad, expect=1)
    check("bad.json" in p.stderr and "rows" in p.stderr, p.stderr)


def case_bad_options(b):
    m = b.args.model
    cases = [
        (["--model", m, "--ctx", "16,abc"], "--ctx: 'abc'"),
        (["--model", m, "--reps", "0"], "--reps"),
        (["--model", m, "--gen", "-1"], "--gen"),
        (["--model", m, "--kv-codecs", "k=q8"], "--kv-codecs"),
        (["--model", m, "--expert-stores", "uring@0"], "--expert-stores"),
        (["--model", m, "--expert-stores", "uring@150%"], "--expert-stores"),
        (["--model", m, "--gpu-layers", "many"], "--gpu-layers: 'many'"),
        (["--model", m, "--no-such-option"], "no-such-option"),
        (["--ctx", "16"], "--model DIR is required"),
        (["--compare", "only-one.json"], "--compare takes two"),
        (["--server", "ftp://x"], "not an http:// URL"),
        (["--model", m, "--clients", "3"], "need --server"),
        (["--server", "http://127.0.0.1:1", "--clients", "0"], "--clients"),
    ]
    for args, message in cases:
        p = b.run(*args, expect=2)
        check(message in p.stderr and "usage: sluice bench" in p.stderr, "%r: stderr %r" % (args, p.stderr))
    # A row that cannot run is a runtime failure (exit 1), recorded in the file; the other rows still run.
    out = os.path.join(b.work, "partial.json")
    p = b.run("--model", m, "--backends", "cpu,no-such-backend", "--ctx", "8", "--gen", "2", "--json-out", out, expect=1)
    with open(out) as f:
        rows = json.load(f)["rows"]
    check(len(rows) == 2 and "error" not in rows[0] and "no-such-backend" in rows[1].get("error", ""), "rows %r" % rows)
    check(rows[0]["decode_tps"] > 0, "the good row was measured")
    check("1 of 2 rows failed" in p.stderr, p.stderr)
    # --backend-options reach every row's backend: a bad one fails the row with the backend's own
    # message naming it; a good one is recorded in the row and shown beside the backend in the table.
    out = os.path.join(b.work, "options.json")
    p = b.run("--model", m, "--ctx", "8", "--gen", "2", "--backend-options", "no-such-option=1", "--json-out", out, expect=1)
    with open(out) as f:
        rows = json.load(f)["rows"]
    check(len(rows) == 1 and "no-such-option" in rows[0].get("error", ""), "rows %r" % rows)
    check(rows[0]["backend_options"] == "no-such-option=1", "the failed row names its options: %r" % rows)
    p = b.run("--model", m, "--ctx", "8", "--gen", "2", "--backend-options", "prefetch=0", "--json-out", out)
    with open(out) as f:
        rows = json.load(f)["rows"]
    check(rows[0]["backend_options"] == "prefetch=0" and rows[0]["decode_tps"] > 0, "rows %r" % rows)
    check("| cpu (prefetch=0) |" in p.stdout, p.stdout)


def case_moe(b):
    model = os.path.join(b.work, "tiny-moe")
    mk = subprocess.run([b.args.sluice, "make-model", "--preset", "tiny-qwen3-moe", "--out", model], capture_output=True, text=True)
    check(mk.returncode == 0, "make-model: " + mk.stderr)
    out = os.path.join(b.work, "moe.json")
    b.run("--model", model, "--expert-stores", "resident,uring@50%,uring:direct=0,qd=4@1", "--ctx", "8", "--gen", "8", "--threads", "2",
          "--json-out", out)
    with open(out) as f:
        doc = json.load(f)
    check(doc["model"]["experts"] > 0, "a MoE model")
    rows = {r["expert_store"]: r for r in doc["rows"]}
    check(set(rows) == {"resident", "uring@50%", "uring:direct=0,qd=4@1"}, "rows %r" % list(rows))
    res = rows["resident"]
    # Every lookup of the resident store hits; with the experts chosen on the device (ABI 2.5, this
    # model's stacked experts, passes of few tokens) the store is not asked at all: no hit rate.
    check(res["expert_bytes_read_per_token"] == 0 and res["hit_rate"] in (1.0, None) and res["expert_budget_mb"] is None,
          "resident reads nothing and never misses: %r" % res)
    for label in ("uring@50%", "uring:direct=0,qd=4@1"):
        r = rows[label]
        check(r["expert_budget_mb"] == 1, "budget of %s: %r" % (label, r["expert_budget_mb"]))
        check(r["expert_bytes_read_per_token"] is not None and r["expert_bytes_read_per_token"] >= 0, "%s bytes %r" % (label, r))
        check(r["hit_rate"] is not None and 0 <= r["hit_rate"] <= 1, "%s hit rate %r" % (label, r))
        check(r["decode_tps"] > 0, label)
    check_decode_bandwidth(doc, model)


def case_plot(b):
    py = None
    for candidate in (sys.executable, "/usr/bin/python3"):
        if candidate and os.path.exists(candidate) and subprocess.run([candidate, "-c", "import matplotlib"], capture_output=True).returncode == 0:
            py = candidate
            break
    if not py:
        print("SKIPPED: matplotlib is missing (apt-get install python3-matplotlib)")
        sys.exit(77)
    b.matrix("plotme.json", "--kv-codecs", "f16,q8", "--ctx", "8,24")
    charts = os.path.join(b.work, "charts")
    p = subprocess.run([py, b.args.plot, os.path.join(b.work, "plotme.json"), "--out", charts], capture_output=True, text=True)
    check(p.returncode == 0, "plot.py: " + p.stderr)
    for name in ("plotme_decode.png", "plotme_prefill.png", "plotme_memory.png"):
        path = os.path.join(charts, name)
        check(os.path.exists(path), name + " written")
        with open(path, "rb") as f:
            check(f.read(8) == b"\x89PNG\r\n\x1a\n", name + " is a PNG")
        check(path in p.stdout, "plot.py prints " + name)
    bad = subprocess.run([py, b.args.plot, b.args.plot], capture_output=True, text=True)
    check(bad.returncode == 1 and "plot.py" in bad.stderr, "a file that is not JSON is refused: " + bad.stderr)


def case_server(b):
    server = Server(b.args.sluice, b.args.model, "--parallel", "2")
    try:
        out = os.path.join(b.work, "server.json")
        p = b.run("--server", server.base_url, "--clients", "3", "--requests", "8", "--gen", "6", "--prompt-lengths", "8,40",
                  "--shared-prefix", "160", "--json-out", out)
        with open(out) as f:
            doc = json.load(f)
        check(doc["server"]["model"] == "tiny-code-qwen2" and doc["server"]["clients"] == 3, "server record %r" % doc["server"])
        rows = {r["class"]: r for r in doc["rows"]}
        every = rows["all"]
        check(every["requests"] == 8 and every["errors"] == 0, "all: %r" % every)
        check(rows["shared_prefix"]["requests"] == 4 and rows["unique"]["requests"] == 4, "classes %r" % rows)
        check(every["completion_tokens"] == 8 * 6, "every request generated gen tokens (ignore_eos): %r" % every)
        check(every["aggregate_tps"] > 0 and 0 < every["ttft_p50_ms"] <= every["ttft_p99_ms"], "figures %r" % every)
        check(abs(every["aggregate_tps"] - every["completion_tokens"] / doc["wall_s"]) < 1e-6 * every["aggregate_tps"], "aggregate = tokens / wall")
        reqs = doc["requests"]
        check(len(reqs) == 8 and all("error" not in r and r["completion_tokens"] == 6 and 0 < r["ttft_ms"] <= r["total_ms"] for r in reqs),
              "requests %r" % reqs)
        shared = [r for r in reqs if r["shared_prefix"]]
        unique = [r for r in reqs if not r["shared_prefix"]]
        check(min(r["prompt_tokens"] for r in shared) > max(r["prompt_tokens"] for r in unique), "the shared prefix is long")
        # The prefix is computed once: later requests that start with it find it in the prompt cache.
        check(any(r["cached_tokens"] >= 16 for r in shared), "prefix reuse: %r" % shared)
        check(all(r["cached_tokens"] == 0 for r in unique), "unique prompts share no page: %r" % unique)
        # The server's own count agrees with the client's.
        served = server.metric("sluice_completion_tokens_total")
        check(served is None or served == 48, "server counted %r tokens" % served)
        check("| all: 8 |" in p.stdout and "[8/8]" in p.stderr, p.stdout + p.stderr)
        # A server that is not there: runtime error (exit 1), named.
        port = server.port
    finally:
        server.stop()
    p = b.run("--server", "http://127.0.0.1:%d" % port, "--requests", "1", expect=1)
    check("does not answer" in p.stderr, p.stderr)


class ClosingServer:
    """An OpenAI-compatible server as llama-server behaves: HTTP/1.1 answers that do not say
    `Connection: close`, after which it closes the connection anyway. A client must reconnect (issue
    30: against llama-server every other request of `sluice bench --server` failed)."""

    def __init__(self):
        import http.server
        import threading
        self.connections = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                outer.connections += 1

            def log_message(self, *a):
                pass

            def answer(self, body, content_type):
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.close_connection = True  # closed although the answer said nothing of it

            def do_GET(self):
                self.answer(json.dumps({"object": "list", "data": [{"id": "closing-model", "object": "model"}]}).encode(),
                            "application/json")

            def do_POST(self):
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                n = request["max_tokens"]
                events = [{"choices": [{"index": 0, "text": "w%d " % i}]} for i in range(n)]
                events.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n}})
                body = "".join("data: %s\n\n" % json.dumps(e) for e in events) + "data: [DONE]\n\n"
                self.answer(body.encode(), "text/event-stream")

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()


def case_server_turns(b):
    """Conversations (--turns): each turn's history holds the turns before, so from the second turn the
    server finds the conversation's prefix cached; the answers name their replica (X-Sluice-Replica)."""
    server = Server(b.args.sluice, b.args.model, "--parallel", "2", "--replica-name", "replica-a")
    try:
        out = os.path.join(b.work, "turns.json")
        p = b.run("--server", server.base_url, "--api", "chat", "--turns", "3", "--clients", "2", "--requests", "4", "--gen", "4",
                  "--prompt-lengths", "40", "--shared-prefix", "0", "--json-out", out)
        with open(out) as f:
            doc = json.load(f)
        check(doc["server"]["turns"] == 3 and doc["server"]["session_ids"] is True, "server record %r" % doc["server"])
        reqs = doc["requests"]
        check(len(reqs) == 12 and all("error" not in r for r in reqs), "4 conversations of 3 turns: %r" % reqs)
        for turn in (0, 1, 2):
            check(sum(1 for r in reqs if r["turn"] == turn) == 4, "turn %d of each conversation" % turn)
        first = [r for r in reqs if r["turn"] == 0]
        later = [r for r in reqs if r["turn"] > 0]
        check(all(r["cached_tokens"] == 0 for r in first), "first turns start cold: %r" % first)
        check(all(r["cached_tokens"] >= 16 for r in later), "later turns find their conversation cached: %r" % later)
        check(min(r["prompt_tokens"] for r in later) > max(r["prompt_tokens"] for r in first), "the history grows")
        rows = {r["class"]: r for r in doc["rows"]}
        check(rows["later_turns"]["cache_hit_rate"] > 0.5 and rows["first_turn"]["cache_hit_rate"] == 0, "hit rates %r" % rows)
        check(doc["replicas"] == [{"replica": "replica-a", "requests": 12, "prompt_tokens": sum(r["prompt_tokens"] for r in reqs),
                                   "cached_tokens": sum(r["cached_tokens"] for r in reqs),
                                   "cache_hit_rate": sum(r["cached_tokens"] for r in reqs) / sum(r["prompt_tokens"] for r in reqs)}],
              "replicas %r" % doc["replicas"])
        check("| replica-a | 12 |" in p.stdout and "later_turns: 8" in p.stdout, p.stdout)
        bad = b.run("--server", server.base_url, "--turns", "2", expect=2)
        check("--api chat" in bad.stderr, bad.stderr)
    finally:
        server.stop()


def case_server_closes(b):
    server = ClosingServer()
    try:
        out = os.path.join(b.work, "closing.json")
        p = b.run("--server", "http://127.0.0.1:%d" % server.port, "--api", "completions", "--clients", "2", "--requests", "8",
                  "--gen", "5", "--json-out", out)
        with open(out) as f:
            doc = json.load(f)
        every = {r["class"]: r for r in doc["rows"]}["all"]
        check(every["requests"] == 8 and every["errors"] == 0, "every request answered after reconnecting: %r\n%s" % (every, p.stderr))
        check(every["completion_tokens"] == 8 * 5, "tokens %r" % every)
        # The model probe and each of the 8 requests had a connection of their own.
        check(server.connections >= 9, "connections %d" % server.connections)
    finally:
        server.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True)
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--plot", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    b = Bench(args)
    globals()["case_" + args.case](b)
    print("ok: bench %s" % args.case)


if __name__ == "__main__":
    main()
