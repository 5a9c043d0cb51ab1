#!/usr/bin/python3
"""Charts from `sluice bench` result files (Debian's python3-matplotlib).

  perf/plot.py RESULT.json [MORE.json ...] [--out DIR] [--title TEXT]

Matrix files ({"machine", "model", "rows"}): one line per configuration (file, backend, gpu layers,
threads, KV codec, expert store) against the context length —
  <name>_decode.png   decode tokens/s (median, min-max bars)
  <name>_prefill.png  prefill tokens/s
  <name>_memory.png   peak RSS and KV cache MB (and device memory where the backend has one)
Server files (`sluice bench --server`, with a "server" object):
  <name>_ttft.png     time to first token of every request, shared-prefix and unique ones apart
<name> is the first file's name without .json (or "compare" for several files). Prints each path.
"""
import argparse
import json
import os
import sys

try:
    import matplotlib
    matplotlib.use("Agg")  # no display: write files only
    import matplotlib.pyplot as plt
except ImportError:
    sys.stderr.write("plot.py: matplotlib is missing (Debian: apt-get install python3-matplotlib)\n")
    sys.exit(3)


def config_label(row, source, several):
    parts = [row.get("backend", "?")]
    if row.get("gpu_layers") not in (None, "", "all"):
        parts.append("gpu-layers " + str(row["gpu_layers"]))
    if row.get("threads"):
        parts.append("%s threads" % row["threads"])
    parts.append("kv " + str(row.get("kv_codec", "?")))
    if row.get("expert_store") not in (None, "resident") or row.get("expert_bytes_read_per_token") is not None:
        parts.append("experts " + str(row.get("expert_store")))
    label = ", ".join(parts)
    return (source + ": " + label) if several else label


def series(files):
    """{label: [row, ...]} sorted by ctx, over every successful row of every matrix file."""
    out = {}
    several = len(files) > 1
    for path, doc in files:
        model = (doc.get("model") or {}).get("name", "")
        source = os.path.splitext(os.path.basename(path))[0] + (" (" + model + ")" if model else "")
        for row in doc.get("rows", []):
            if row.get("error") or row.get("ctx") is None:
                continue
            out.setdefault(config_label(row, source, several), []).append(row)
    for rows in out.values():
        rows.sort(key=lambda r: r["ctx"])
    return out


def subtitle(files):
    lines = []
    for path, doc in files:
        m = doc.get("machine", {})
        model = (doc.get("model") or {}).get("name") or (doc.get("server") or {}).get("model", "?")
        lines.append("%s: %s, %s cores, commit %s, %s, load %s" % (
            model, m.get("cpu", "?"), m.get("cores", "?"), str(m.get("commit", "?"))[:10], m.get("date", "?"), m.get("loadavg", "?")))
    return "\n".join(lines)


def line_chart(path, files, data, field, ylabel, title):
    fig, ax = plt.subplots(figsize=(9, 5.5))
    plotted = False
    for label, rows in sorted(data.items()):
        pts = [(r["ctx"], r.get(field), r.get(field + "_min"), r.get(field + "_max")) for r in rows if r.get(field) is not None]
        if not pts:
            continue
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        lo = [p[1] - (p[2] if p[2] is not None else p[1]) for p in pts]
        hi = [(p[3] if p[3] is not None else p[1]) - p[1] for p in pts]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=label)
        plotted = True
    if not plotted:
        plt.close(fig)
        return None
    ax.set_xlabel("context (prompt tokens before decoding)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, subtitle(files), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.06 * len(files), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def memory_chart(path, files, data, title):
    """Two panels: the row process's peak RSS; the KV cache (solid) and device memory (dashed)."""
    fig, (rss_ax, kv_ax) = plt.subplots(1, 2, figsize=(12, 5.5))
    plotted = False
    for i, (label, rows) in enumerate(sorted(data.items())):
        color = "C%d" % (i % 10)
        rss = [(r["ctx"], r["peak_rss_mb"]) for r in rows if r.get("peak_rss_mb") is not None]
        if rss:
            rss_ax.plot([p[0] for p in rss], [p[1] for p in rss], "-", marker="o", color=color, label=label)
            plotted = True
        kv = [(r["ctx"], r["kv_bytes"] / float(1 << 20)) for r in rows if r.get("kv_bytes") is not None]
        if kv:
            kv_ax.plot([p[0] for p in kv], [p[1] for p in kv], "-", marker="o", color=color)
        dev = [(r["ctx"], r["device_mem_mb"]) for r in rows if r.get("device_mem_mb") is not None]
        if dev:
            kv_ax.plot([p[0] for p in dev], [p[1] for p in dev], "--", marker="s", color=color)
    if not plotted:
        plt.close(fig)
        return None
    for ax in (rss_ax, kv_ax):
        ax.set_xlabel("context (prompt tokens before decoding)")
        ax.grid(True, alpha=0.3)
    rss_ax.set_ylabel("peak RSS of the row's process, MB")
    rss_ax.set_ylim(bottom=0)
    kv_ax.set_ylabel("MB (log)")
    kv_ax.set_yscale("log")
    kv_ax.set_title("KV cache (solid), device memory (dashed)", fontsize=9)
    rss_ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.text(0.01, 0.01, subtitle(files), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.06 * len(files), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def ttft_chart(path, src, doc, title):
    reqs = [r for r in doc.get("requests", []) if not r.get("error")]
    if not reqs:
        return None
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for shared, color, name in ((True, "C0", "shared prefix"), (False, "C1", "unique")):
        pts = [(r["index"], r["ttft_ms"], r.get("prompt_tokens", 0), r.get("cached_tokens", 0)) for r in reqs if r.get("shared_prefix") == shared]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], color=color, label=name)
            for p in pts:
                ax.annotate("%d/%d" % (p[3], p[2]), (p[0], p[1]), fontsize=6, xytext=(3, 3), textcoords="offset points")
    s = doc.get("server", {})
    ax.set_xlabel("request (annotated: cached / prompt tokens)")
    ax.set_ylabel("time to first token, ms")
    ax.set_title(title or "%s: %s clients, %s requests, gen %s" % (s.get("model", "?"), s.get("clients"), s.get("requests"), s.get("gen")))
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.text(0.01, 0.01, subtitle([(src, doc)]), fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description="PNG charts from sluice bench result files")
    ap.add_argument("files", nargs="+", help="result files written by sluice bench --json-out")
    ap.add_argument("--out", help="folder for the PNGs (default: the first file's folder)")
    ap.add_argument("--title", default="", help="chart title prefix")
    args = ap.parse_args()
    files = []
    for path in args.files:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            sys.stderr.write("plot.py: %s: %s\n" % (path, e))
            return 1
        if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
            sys.stderr.write("plot.py: %s: not a sluice bench result file (no \"rows\" list)\n" % path)
            return 1
        files.append((path, doc))
    out_dir = args.out or os.path.dirname(os.path.abspath(args.files[0]))
    os.makedirs(out_dir, exist_ok=True)
    name = os.path.splitext(os.path.basename(args.files[0]))[0] if len(files) == 1 else "compare"
    written = []
    matrix = [(p, d) for p, d in files if "server" not in d]
    if matrix:
        data = series(matrix)
        t = (args.title + ": ") if args.title else ""
        written.append(line_chart(os.path.join(out_dir, name + "_decode.png"), matrix, data, "decode_tps", "decode tokens/s", t + "decode at depth"))
        written.append(line_chart(os.path.join(out_dir, name + "_prefill.png"), matrix, data, "prefill_tps", "prefill tokens/s", t + "prefill"))
        written.append(memory_chart(os.path.join(out_dir, name + "_memory.png"), matrix, data, t + "memory against context"))
    for path, doc in files:
        if "server" in doc:
            stem = os.path.splitext(os.path.basename(path))[0]
            written.append(ttft_chart(os.path.join(out_dir, stem + "_ttft.png"), path, doc, args.title))
    written = [w for w in written if w]
    if not written:
        sys.stderr.write("plot.py: no successful rows to plot\n")
        return 1
    for w in written:
        print(w)
    return 0


if __name__ == "__main__":
    sys.exit(main())
