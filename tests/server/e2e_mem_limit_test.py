#!/usr/bin/env python3
"""End-to-end tests of `--mem-limit` (issue 27) against the real binary and the bundled model.

What the limit counts: the whole resident set of the server process (VmRSS) — its code and the
libraries it maps (PoCL's LLVM included where the OpenCL plugin loads), the weights, the KV pools,
activations and a headroom. The plan measures the process before the weights load and gives the
main KV pool what is left, so the burst test sets a limit a few MiB above the fixed parts read
from `--info` and checks VmRSS/VmHWM of the process from outside while long requests run.
Exit 77 (ctest SKIP_RETURN_CODE) when the binary or model is missing."""
import json
import os
import re
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_server_harness import Server, run_e2e_tests  # noqa: E402

ARGS = None
MIB = 1 << 20


def run_sluice(*args, timeout=120):
    return subprocess.run([ARGS.sluice, "serve", "--model", ARGS.model, "--threads", "2", *args], capture_output=True,
                          text=True, timeout=timeout)


def plan_parts(*extra):
    """The parts `--info` plans under a generous limit, in bytes: process, weights, activations, ..."""
    out = run_sluice("--info", "--mem-limit", "64G", *extra)
    assert out.returncode == 0, out.stderr
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    parts = {}
    for name, value, unit in re.findall(r"^\s{4}(\S[\w ,()-]*?)\s{2,}([0-9.]+) (B|KiB|MiB|GiB)", out.stdout, re.M):
        parts[name.strip()] = float(value) * units[unit]
    return parts, out.stdout


def status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


class BadLimits(unittest.TestCase):
    def test_invalid_or_zero_size_refuses_to_start_with_exit_2(self):
        for value in ["0", "12X", "-5", "lots", "0G"]:
            out = run_sluice("--mem-limit", value, "--port", "0")
            self.assertEqual(out.returncode, 2, (value, out.stdout, out.stderr))
            self.assertIn("--mem-limit", out.stderr)

    def test_limit_below_the_weights_refuses_with_the_numbers(self):
        out = run_sluice("--mem-limit", "40", "--port", "0")
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("too small", out.stderr)
        self.assertRegex(out.stderr, r"weights [0-9.]+ MiB")

    def test_info_plans_every_part_under_the_limit(self):
        parts, text = plan_parts()
        for part in ["process (code, libraries)", "weights", "activations", "headroom", "KV pages", "total"]:
            self.assertIn(part, parts, text)
        self.assertNotIn("not enforced", text)
        total = re.search(r"total\s+([0-9.]+) (MiB|GiB) of", text)
        self.assertIsNotNone(total, text)


class BurstUnderLimit(unittest.TestCase):
    BACKEND = "cpu"
    PROMPT_TOKENS = 200
    MAX_TOKENS = 800
    BURST = 12

    @classmethod
    def setUpClass(cls):
        backend = ("--backend", cls.BACKEND)
        parts, _ = plan_parts("--parallel", "4", *backend)
        fixed = parts["process (code, libraries)"] + parts["weights"] + parts["activations"]
        # A KV pool of about 6 MiB (some 3000 tokens of f16 KV): three of the burst's sequences at a time,
        # each running for a second or more, so the last ones wait longer than --mem-wait.
        # headroom = 16 MiB + limit / 50 (engine/memory_budget.cpp), solved for the limit.
        cls.limit_mib = int((fixed + 16 * MIB + 6 * MIB) / (1 - 1 / 50) / MIB) + 1
        cls.srv = Server(ARGS.sluice, ARGS.model, *backend, "--parallel", "4", "--mem-limit", "%dM" % cls.limit_mib, "--mem-wait", "1",
                         "--max-tokens", "8000")

    @classmethod
    def tearDownClass(cls):
        cls.srv.stop()

    def completion(self, max_tokens, prompt_tokens=None, timeout=300, stream=False):
        prompt = [(7 * i + 11) % 8000 + 100 for i in range(prompt_tokens or self.PROMPT_TOKENS)]
        return self.srv.request("POST", "/v1/completions",
                                {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                                 "stream": stream, "stream_options": {"include_usage": True}},
                                timeout=timeout)

    def test_burst_stays_under_the_limit_and_every_request_completes_or_gets_503(self):
        limit = self.limit_mib * MIB
        status, health = self.srv.json("GET", "/health")
        self.assertEqual(health["memory"]["limit_bytes"], limit)
        pool_tokens = health["memory"]["kv_tokens"]
        # The burst cannot all run at once: each request claims its prompt and max_tokens.
        self.assertLess(pool_tokens, 4 * (self.PROMPT_TOKENS + self.MAX_TOKENS), health)
        self.assertGreaterEqual(pool_tokens, self.PROMPT_TOKENS + self.MAX_TOKENS, health)

        pid = self.srv.proc.pid
        peak_seen = [0]
        done = threading.Event()

        def watch():
            while not done.is_set():
                peak_seen[0] = max(peak_seen[0], status_kib(pid, "VmRSS"))
                time.sleep(0.02)

        watcher = threading.Thread(target=watch)
        watcher.start()
        results = [None] * self.BURST

        def one(i):  # every other one streamed: a refused stream is a plain 503 before any event
            results[i] = self.completion(self.MAX_TOKENS, stream=i % 2 == 1)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(results))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        watcher.join()

        full = rejected = 0
        for status, headers, body in results:
            if status == 200 and headers["content-type"].startswith("text/event-stream"):
                events = [line[6:] for line in body.decode().split("\n") if line.startswith("data: ")]
                self.assertEqual(events[-1], "[DONE]")
                chunks = [json.loads(e) for e in events[:-1]]
                self.assertEqual(chunks[-1]["usage"]["completion_tokens"], self.MAX_TOKENS)
                self.assertIn("length", [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")])
                full += 1
                continue
            doc = json.loads(body)
            if status == 200:
                self.assertEqual(doc["usage"]["completion_tokens"], self.MAX_TOKENS, doc)
                self.assertEqual(doc["choices"][0]["finish_reason"], "length")
                full += 1
            else:
                self.assertEqual(status, 503, doc)
                self.assertEqual(doc["error"]["code"], "memory_limit", doc)
                self.assertIn("KV cache", doc["error"]["message"])
                self.assertGreaterEqual(int(headers["retry-after"]), 1)
                rejected += 1
        print("\n  burst on %s: %d full answers, %d answered 503; peak VmRSS %.1f MiB, VmHWM %.1f MiB, limit %d MiB"
              % (self.BACKEND, full, rejected, peak_seen[0] / MIB, status_kib(pid, "VmHWM") / MIB, self.limit_mib), file=sys.stderr)
        self.assertGreater(full, 0)
        self.assertGreater(rejected, 0, "the burst should outlast --mem-wait for some requests")

        self.assertLessEqual(peak_seen[0], limit, "VmRSS %.1f MiB above the limit %d MiB" % (peak_seen[0] / MIB, self.limit_mib))
        self.assertLessEqual(status_kib(pid, "VmHWM"), limit)
        status, health = self.srv.json("GET", "/health")
        mem = health["memory"]
        self.assertLessEqual(mem["planned_bytes"], mem["limit_bytes"], mem)
        self.assertLessEqual(mem["peak_resident_bytes"], mem["limit_bytes"], mem)
        self.assertEqual(mem["kv_pages_claimed"], 0, mem)
        self.assertGreaterEqual(self.srv.metric("sluice_rejected_memory_total"), rejected)
        self.assertEqual(self.srv.metric("sluice_memory_limit_bytes"), limit)

        # It keeps serving afterwards.
        status, _, body = self.completion(20)
        self.assertEqual(status, 200, body)

    def test_request_that_could_never_fit_is_refused_at_once_with_the_numbers(self):
        status, health = self.srv.json("GET", "/health")
        pool_tokens = health["memory"]["kv_tokens"]
        status, _, body = self.completion(pool_tokens, prompt_tokens=50, timeout=30)
        self.assertEqual(status, 400, body)
        err = json.loads(body)["error"]
        self.assertEqual(err["param"], "max_tokens")
        self.assertIn(str(pool_tokens), err["message"])
        status, _, body = self.completion(5, prompt_tokens=pool_tokens, timeout=30)
        self.assertEqual(status, 400, body)
        self.assertEqual(json.loads(body)["error"]["code"], "context_length_exceeded")
        # n choices claim n times: two of them may not ask for more than half the pool each.
        prompt = list(range(100, 150))
        status, _, body = self.srv.request("POST", "/v1/completions",
                                           {"prompt": prompt, "n": 2, "max_tokens": pool_tokens // 2, "temperature": 0})
        self.assertEqual(status, 400, body)
        self.assertIn("2 choices", json.loads(body)["error"]["message"])
        # Without max_tokens the request gets what the pool leaves (the default would not fit).
        prompt = list(range(100, 140))
        status, _, body = self.srv.request("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 8, "temperature": 0})
        self.assertEqual(status, 200, body)


def has_opencl_device():
    out = subprocess.run([ARGS.sluice, "devices"], capture_output=True, text=True, timeout=60)
    return "--backend opencl:" in out.stdout


class BurstUnderLimitOpenCL(BurstUnderLimit):
    """The same on the OpenCL backend (PoCL on a machine without a GPU): the device's memory is the KV
    pages' budget too (the plan takes the smaller), and PoCL's buffers and compiled kernels are host
    memory, inside the process's resident set."""
    BACKEND = "opencl"

    @classmethod
    def setUpClass(cls):
        if not has_opencl_device():
            raise unittest.SkipTest("no OpenCL device (install PoCL: tools/setup.sh)")
        super().setUpClass()

    def test_info_names_the_device_budget(self):
        _, text = plan_parts("--backend", "opencl")
        self.assertRegex(text, r"KV pages also within opencl: .*: [0-9.]+ [MG]iB for them")


def main():
    def use(args):
        global ARGS
        ARGS = args
    return run_e2e_tests(use)


if __name__ == "__main__":
    sys.exit(main())
