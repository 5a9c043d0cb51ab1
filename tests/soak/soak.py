#!/usr/bin/env python3
"""The soak test (`make soak`): the real `sluice serve` on the bundled model, on a free loopback port,
under a seeded mix of concurrent clients for a bounded time — normal completions (plain and streamed),
hang-ups mid-stream, malformed, wrongly typed, deeply nested and oversized requests, garbage bytes,
slow writers and slow readers — while a separate process times GET /health every 100 ms.

Checks at the end: the server never died and exits cleanly on SIGTERM; every answer was the right one
(status, OpenAI-style error object, valid UTF-8 JSON); /health p99 under the bound; once the clients are
gone, no sequence, queued request or KV page is left held; RSS back within 5 % of its baseline; and the
abuse paths really ran (disconnect and slow-client cancels counted). Exit 0 only if every check passes.

RSS baseline: taken after a warm-up that runs the same mix (every request kind, the same concurrency),
once the server is idle again. First use grows the process for good — glibc's arenas for each thread,
its mmap threshold rising after the first large body is freed, the chat template compiled once, the
KV cache is allocated (and zeroed) at start — and none of that is a leak. What must not happen is growth
that continues with the traffic: the final RSS, idle again, is compared with that baseline."""
import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from sluice_server_harness import Server  # noqa: E402
import traffic  # noqa: E402
from answers import Unexpected  # noqa: E402
from traffic import KINDS, Target  # noqa: E402
from raw_http import ProtocolError  # noqa: E402

# The server's limits for the run: a 1 MiB body limit (so nested and oversized bodies stay cheap to send),
# short read and idle timeouts (so stalled writers are dropped within the run), the default write timeout
# and context (what `make run` serves), and a max_tokens ceiling that lets a stream fill the context.
SERVER_LIMITS = {"body_limit": 1 << 20, "read_timeout": 5, "idle_timeout": 10, "write_timeout": 30}


def server_args(parallel):
    lim = SERVER_LIMITS
    return ["--parallel", str(parallel), "--body-limit", str(lim["body_limit"]), "--read-timeout", str(lim["read_timeout"]),
            "--idle-timeout", str(lim["idle_timeout"]), "--write-timeout", str(lim["write_timeout"]),
            "--max-tokens", "4096", "--log-level", "warn"]


# --- the server process ----------------------------------------------------------------------------------

def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def rss_by_kind(pid):
    """Resident bytes by kind of mapping (/proc/PID/smaps): the main heap, anonymous mappings (glibc's
    per-thread arenas, large blocks, the KV cache), the model files, other files."""
    out = Counter()
    kind = None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            head = line.split()
            if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                path = head[5] if len(head) > 5 else ""
                kind = ("heap" if path == "[heap]" else "anonymous" if not path else "stack" if path.startswith("[stack")
                        else "model files" if path.endswith(".safetensors") else "other")
            elif head and head[0] == "Rss:":
                out[kind] += int(head[1]) * 1024
    return out


class Watcher(threading.Thread):
    """Samples the server every half second: alive or not, and its resident memory."""

    def __init__(self, proc):
        super().__init__(daemon=True)
        self.proc = proc
        self.died_at = None
        self.peak_rss = 0
        self.rss = []  # (time, bytes)
        self.stop_event = threading.Event()

    def run(self):
        while not self.stop_event.wait(0.5):
            if self.proc.poll() is not None:
                self.died_at = time.time()
                return
            try:
                rss = rss_bytes(self.proc.pid)
            except OSError:
                continue
            self.peak_rss = max(self.peak_rss, rss)
            self.rss.append((time.time(), rss))

    def rss_between(self, start, end, parts=4):
        """The highest RSS in each of `parts` equal spans of [start, end): growth that goes on, or levels off."""
        out = []
        for i in range(parts):
            a, b = start + (end - start) * i / parts, start + (end - start) * (i + 1) / parts
            values = [r for t, r in self.rss if a <= t < b]
            out.append(max(values) if values else 0)
        return out

    @property
    def alive(self):
        return self.died_at is None and self.proc.poll() is None


def metrics(srv):
    status, _, data = srv.request("GET", "/metrics", timeout=10)
    out = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def idle_state(m):
    """The gauges that must return to zero once every client is gone, and the KV pages the prefix cache
    keeps (those stay: they are reusable prompt blocks, evicted on demand, not leaks)."""
    state = {"active sequences": m.get("sluice_active_sequences"), "queue depth": m.get("sluice_queue_depth"),
             "active generations": m.get("sluice_http_active_generations")}
    if "sluice_kv_pages_in_use" in m:
        state["KV pages held by sequences"] = m["sluice_kv_pages_in_use"]
        state["recent-window pages held"] = m.get("sluice_kv_recent_pages_in_use", 0)
    else:  # older servers: the bytes of the pages sequences hold
        state["KV bytes held by sequences"] = m.get("sluice_kv_cache_used_bytes")
    return state


def settle(srv, timeout=30):
    """Waits until the server is idle (every gauge of idle_state at 0, only our own connection open)."""
    deadline = time.time() + timeout
    while True:
        try:
            m = metrics(srv)
        except OSError:
            return False, {}, {}
        state = idle_state(m)
        idle = all(v == 0 for v in state.values()) and m.get("sluice_http_open_connections", 0) <= 1
        if idle or time.time() > deadline:
            return idle, m, state
        time.sleep(0.5)


def rss_after_malloc_trim(pid):
    """Asks the server's allocator to give free memory back (glibc malloc_trim(0), called through gdb),
    then reads RSS again: growth that goes away was free memory the allocator kept, not live data.
    None where gdb is missing or cannot attach."""
    try:
        subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "call (int) malloc_trim(0)"], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return steady_rss(pid)


def steady_rss(pid):
    """The median of five readings a quarter second apart (after the server went idle)."""
    samples = []
    for _ in range(5):
        samples.append(rss_bytes(pid))
        time.sleep(0.25)
    return statistics.median(samples)


# --- traffic -------------------------------------------------------------------------------------------

class Tally:
    def __init__(self):
        self.outcomes = defaultdict(Counter)  # kind -> label -> count
        self.problems = defaultdict(Counter)  # kind -> message -> count
        self.loop_lag = []  # seconds the driver's event loop woke up late, every 0.1 s

    def add(self, kind, label, problem=None):
        self.outcomes[kind][label] += 1
        if problem:  # long numbers masked, so that one kind of wrong answer is listed once
            self.problems[kind][re.sub(r"\d{4,}", "N", problem[:200])] += 1

    def total(self):
        return sum(sum(c.values()) for c in self.outcomes.values())

    def wrong(self):
        return sum(sum(c.values()) for c in self.problems.values())


async def run_traffic(target, seconds, clients, seed, names, alive, tally, grace=30):
    """`clients` concurrent clients, each picking request kinds with its own seeded generator until
    `seconds` pass; what is still running `grace` seconds later is stopped (counted, not judged)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    slack = max(target.read_timeout, target.idle_timeout) + 10

    async def client(index):
        rng = traffic.new_rng(seed, index)
        while loop.time() < deadline and alive():
            name = traffic.pick(rng, names)
            fn, _, bound = KINDS[name]
            problem = None
            try:
                label = await asyncio.wait_for(fn(target, rng), bound + slack)
            except asyncio.CancelledError:
                tally.add(name, "stopped at end")
                raise
            except Unexpected as e:
                label, problem = "wrong", str(e)
            except asyncio.TimeoutError:
                label, problem = "no answer", "no answer within %d s" % (bound + slack)
            except (OSError, asyncio.IncompleteReadError, ProtocolError) as e:
                label, problem = type(e).__name__, "connection: %s: %s" % (type(e).__name__, e)
            if problem and not alive():
                problem = "server died: " + problem
            tally.add(name, label, problem)

    async def lag_meter():  # how late this loop wakes up: a driver starved of CPU delays its own clients
        while True:
            before = loop.time()
            await asyncio.sleep(0.1)
            tally.loop_lag.append(loop.time() - before - 0.1)

    meter = asyncio.ensure_future(lag_meter())
    tasks = [asyncio.ensure_future(client(i)) for i in range(clients)]
    _, pending = await asyncio.wait(tasks, timeout=seconds + grace)
    for t in pending:
        t.cancel()
    meter.cancel()
    await asyncio.gather(meter, *pending, return_exceptions=True)


class HealthProbe:
    def __init__(self, srv):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "health_probe.py"), "--host", srv.host,
                                      "--port", str(srv.port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def finish(self):
        out, _ = self.proc.communicate("", timeout=60)
        return json.loads(out)["samples"]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def percentile(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100.0 * (len(s) - 1))))]


# --- report --------------------------------------------------------------------------------------------

def print_mix(tally, title):
    print("\n%-20s %7s  %-44s %s" % (title, "count", "outcomes", "wrong"))
    for kind in sorted(tally.outcomes, key=lambda k: -sum(tally.outcomes[k].values())):
        c = tally.outcomes[kind]
        labels = " ".join("%s×%d" % (k, v) for k, v in sorted(c.items(), key=lambda kv: -kv[1]))
        print("%-20s %7d  %-44s %d" % (kind, sum(c.values()), labels, sum(tally.problems[kind].values())))
    print("%-20s %7d" % ("total", tally.total()))
    if tally.wrong():
        print("\nwrong answers (first of each):")
        shown = 0
        for kind, msgs in tally.problems.items():
            for msg, n in msgs.most_common():
                if shown < 30:
                    print("  %-18s ×%-5d %s" % (kind, n, msg))
                shown += 1


def mib(b):
    return "%.1f MiB" % (b / (1 << 20))


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--seconds", type=float, default=600, help="length of the measured run")
    ap.add_argument("--warmup", type=float, default=None, help="seconds of warm-up (default: a tenth of the run, 30-60 s)")
    ap.add_argument("--clients", type=int, default=24)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--seed", type=int, default=23)
    ap.add_argument("--skip", default="", help="comma-separated request kinds to leave out (see traffic.KINDS)")
    ap.add_argument("--only", default="", help="comma-separated request kinds to run, no others (to find what grows)")
    ap.add_argument("--health-p99-ms", type=float, default=100.0)
    ap.add_argument("--rss-tolerance", type=float, default=0.05)
    ap.add_argument("--trim-check", action="store_true",
                    help="after the run, also read RSS once the allocator has trimmed (gdb; done anyway when RSS fails)")
    args = ap.parse_args()

    skip = {s for s in args.skip.split(",") if s}
    only = {s for s in args.only.split(",") if s}
    if only:
        skip |= set(KINDS) - only
    unknown = (skip | only) - set(KINDS)
    if unknown:
        ap.error("unknown kinds: %s (known: %s)" % (", ".join(sorted(unknown)), ", ".join(KINDS)))
    names = [k for k in KINDS if k not in skip]
    warmup = args.warmup if args.warmup is not None else min(60.0, max(30.0, args.seconds / 10))
    if not os.path.exists(args.sluice):
        print("soak: no binary at %s (make build)" % args.sluice)
        return 2

    srv = Server(args.sluice, args.model, *server_args(args.parallel))
    print("soak: %g s (+%g s warm-up), %d clients, seed %d, load %s\n  %s" %
          (args.seconds, warmup, args.clients, args.seed, load(), " ".join(srv.cmd)), flush=True)
    watcher = Watcher(srv.proc)
    watcher.start()
    ctx_size = srv.json("GET", "/health")[1]["context_size"]
    target = Target(srv.host, srv.port, ctx_size=ctx_size, **SERVER_LIMITS)
    checks = []
    tally, warm_tally = Tally(), Tally()
    soak_started = time.time()
    samples, m, state, idle, baseline, after, alive_after_traffic, quarters = [], {}, {}, False, 0, 0, False, []
    baseline_kinds = after_kinds = Counter()
    trimmed = None
    probe = HealthProbe(srv)
    try:
        asyncio.run(run_traffic(target, warmup, args.clients, args.seed + 1, names, lambda: watcher.alive, warm_tally))
        warm_idle = settle(srv)[0] if watcher.alive else False
        baseline = steady_rss(srv.proc.pid) if watcher.alive else 0
        baseline_kinds = rss_by_kind(srv.proc.pid) if watcher.alive else Counter()
        print("warm-up done: idle %s, baseline RSS %s, load %s" % (warm_idle, mib(baseline), load()), flush=True)

        started = time.time()
        asyncio.run(run_traffic(target, args.seconds, args.clients, args.seed, names, lambda: watcher.alive, tally))
        elapsed = time.time() - started
        quarters = watcher.rss_between(started, started + elapsed)
        samples = probe.finish()
        alive_after_traffic = watcher.alive
        idle, m, state = settle(srv) if alive_after_traffic else (False, {}, {})
        after = steady_rss(srv.proc.pid) if alive_after_traffic else 0
        after_kinds = rss_by_kind(srv.proc.pid) if alive_after_traffic else Counter()
        if alive_after_traffic and (args.trim_check or abs(after - baseline) > args.rss_tolerance * baseline):
            trimmed = rss_after_malloc_trim(srv.proc.pid)
        print("run done in %.0f s, load %s" % (elapsed, load()), flush=True)
    finally:
        stop_started = time.time()
        try:
            rc = srv.stop(timeout=20)
        except subprocess.TimeoutExpired:
            rc = "no exit within 20 s (killed)"
        stop_seconds = time.time() - stop_started
        watcher.stop_event.set()
        probe.kill()

    if warm_tally.wrong() or not tally.total():
        print_mix(warm_tally, "warm-up: kind")
    print_mix(tally, "request kind")

    died = watcher.died_at is not None and watcher.died_at < stop_started
    checks.append(("server alive throughout", alive_after_traffic and not died,
                   "up for the whole run" if alive_after_traffic and not died else "died %.0f s after the start (exit %s)" %
                   ((watcher.died_at or time.time()) - soak_started, srv.proc.returncode)))
    wrong, total = tally.wrong() + warm_tally.wrong(), tally.total() + warm_tally.total()
    checks.append(("every answer as expected", wrong == 0 and tally.total() > 0,
                   "%d wrong of %d requests (warm-up included)" % (wrong, total)))

    lat = [s[1] for s in samples]
    failed_probes = [s for s in samples if s[2] != 200]
    p50, p99, worst = percentile(lat, 50), percentile(lat, 99), max(lat) if lat else float("nan")
    checks.append(("/health p99 < %g ms" % args.health_p99_ms, bool(lat) and p99 < args.health_p99_ms and not failed_probes,
                   "p50 %.1f ms, p99 %.1f ms, max %.1f ms over %d probes (%d failed)" %
                   (p50, p99, worst, len(lat), len(failed_probes))))

    leak_detail = ", ".join("%s %g" % kv for kv in state.items())
    if "sluice_kv_pages_cached" in m:
        leak_detail += " (prefix cache keeps %g of %g pages)" % (m["sluice_kv_pages_cached"], m.get("sluice_kv_pages_capacity", 0))
    checks.append(("no leaked sequences or pages", idle, leak_detail or "server not reachable"))

    growth = (after - baseline) / baseline if baseline else float("inf")
    checks.append(("RSS within %g %% of baseline" % (args.rss_tolerance * 100), abs(growth) <= args.rss_tolerance,
                   "baseline %s, after %s (%+.1f %%); peak by quarter of the run %s" %
                   (mib(baseline), mib(after), growth * 100, " ".join("%.1f" % (q / (1 << 20)) for q in quarters))))
    checks.append(("clean exit on SIGTERM", rc == 0, "exit %s in %.1f s" % (rc, stop_seconds)))

    disconnects = m.get("sluice_disconnect_cancels_total", 0)
    slow = m.get("sluice_slow_client_cancels_total", 0)
    exercised = ((disconnects > 0 or not {"stream_disconnect", "wait_disconnect"} - skip) and
                 (slow > 0 or not {"slow_reader_queue", "slow_reader_stall"} - skip))
    checks.append(("abuse paths exercised", exercised,
                   "disconnect cancels %g, slow-client cancels %g, 503s %g" %
                   (disconnects, slow, m.get("sluice_rejected_overloaded_total", 0))))

    if tally.loop_lag:
        lag = [x * 1000 for x in (percentile(tally.loop_lag, 50), percentile(tally.loop_lag, 99), max(tally.loop_lag))]
        print("\ndriver event-loop lag: p50 %.1f ms, p99 %.1f ms, max %.0f ms%s" %
              (lag[0], lag[1], lag[2], " (the machine was short of CPU: timings are noisy)" if lag[1] > 50 else ""))
    if trimmed is not None:
        print("RSS after malloc_trim(0) in the server: %s (%+.1f %% on the baseline, which was not trimmed)" %
              (mib(trimmed), (trimmed - baseline) / baseline * 100))
    if after_kinds:
        print("resident memory by mapping, baseline -> after: " + ", ".join(
            "%s %.1f -> %.1f MiB" % (k, baseline_kinds[k] / (1 << 20), after_kinds[k] / (1 << 20))
            for k in sorted(set(baseline_kinds) | set(after_kinds), key=lambda k: -after_kinds[k])))
    log = [line.rstrip() for line in srv.stderr_lines]
    print("\nserver log (--log-level warn): %d lines%s" % (len(log), ", the last:" if log else ""))
    for line in log[-5:]:
        print("  " + line[:200])

    print("\n%-32s %-6s %s" % ("check", "result", "detail"))
    for name, ok, detail in checks:
        print("%-32s %-6s %s" % (name, "PASS" if ok else "FAIL", detail))
    if skip:
        print("(left out: %s)" % ", ".join(sorted(skip)))
    passed = sum(1 for _, ok, _ in checks if ok)
    print("\nsoak: %d passed, %d failed" % (passed, len(checks) - passed))
    return 0 if passed == len(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
