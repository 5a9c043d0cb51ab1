#!/usr/bin/env python3
"""Single-stream decode speed of an OpenAI-compatible server (Sluice or llama-server), the same way for both.

Sends prompts of token ids (slices of a token file such as ../shared/golden/eval_code_ids.json) one at a
time to POST /v1/completions, streamed, greedy (temperature 0), and reports per request the tokens
generated and the decode rate: (tokens - 1) / (time of the last token - time of the first). The count
comes from the server's own report (usage, or llama-server's timings), not from the chunks: a
speculative server sends several tokens in one chunk. Prints one JSON object: the requests, their mean
rate, and the server's speculative counters where it reports them (llama-server's timings draft_n /
draft_n_accepted; Sluice's /metrics).

  decode_stream_client.py --url http://127.0.0.1:8090 --ids eval_code_ids.json --prompts 4 --prompt-len 256 --gen 128
"""
import argparse
import json
import time
import urllib.request


def stream_completion(url, prompt, gen, timeout):
    body = json.dumps({"prompt": prompt, "max_tokens": gen, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}, "cache_prompt": False}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    start = time.monotonic()
    first = last = None
    tokens = None
    timings = None
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        for raw in resp:
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            choices = chunk.get("choices") or []
            if choices and (choices[0].get("text") or "") != "":
                now = time.monotonic()
                first = first if first is not None else now
                last = now
            if chunk.get("usage"):
                tokens = chunk["usage"].get("completion_tokens", tokens)
            if chunk.get("timings"):
                timings = chunk["timings"]
                tokens = timings.get("predicted_n", tokens)
    rate = None
    if tokens and first is not None and last > first:
        rate = (tokens - 1) / (last - first)
    return {"tokens": tokens, "ttft_s": None if first is None else first - start, "decode_tps": rate, "timings": timings}


def sluice_spec_metrics(url):
    try:
        text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    except Exception:  # llama-server without --metrics
        return None
    out = {}
    for line in text.splitlines():
        if line.startswith("sluice_spec_") or line.startswith("sluice_decode_pass"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out or None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--ids", required=True, help="a JSON list of token ids")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--stride", type=int, default=4096, help="token distance between the prompts' starts")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--label", default="")
    a = ap.parse_args()
    ids = json.load(open(a.ids))
    stream_completion(a.url, ids[-32:], 8, a.timeout)  # warm-up: programs built, clocks up
    runs = []
    for p in range(a.prompts):
        start = (p * a.stride) % max(1, len(ids) - a.prompt_len)
        runs.append(stream_completion(a.url, ids[start:start + a.prompt_len], a.gen, a.timeout))
    rates = [r["decode_tps"] for r in runs if r["decode_tps"]]
    draft_n = sum((r["timings"] or {}).get("draft_n", 0) or 0 for r in runs)
    draft_acc = sum((r["timings"] or {}).get("draft_n_accepted", 0) or 0 for r in runs)
    print(json.dumps({"label": a.label, "mean_decode_tps": sum(rates) / len(rates) if rates else None,
                      "requests": runs, "peer_draft_n": draft_n, "peer_draft_accepted": draft_acc,
                      "sluice_metrics": sluice_spec_metrics(a.url)}))


if __name__ == "__main__":
    main()
