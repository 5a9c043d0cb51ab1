#!/usr/bin/env bash
# Proves perf/gguf_peer_model.py's mapping, not just that the peer loads it: each zoo2 folder's own
# weights written as an f32 GGUF (--weights real), run greedily through the peer's CPU libllama
# (perf/gguf_peer_check.cpp), against the folder's golden.json (transformers, float32): greedy ids
# identical and last-position logits within 1e-3 of max |logit|, as ../shared/README.md sets them.
#
#   perf/gguf_peer_check.sh PEER_SRC PEER_BUILD_BIN [MODEL_DIR...]
#   e.g. perf/gguf_peer_check.sh /work/peer-cpu/lcpp /work/peer-cpu/build/bin
# Needs numpy for the python that runs it (PYTHON, default /usr/bin/python3).
set -euo pipefail
SRC=$1 BIN=$2; shift 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=("$ROOT"/../shared/models/zoo2/{gemma4_text_moe,gemma4_text,qwen3_5_moe_text,qwen3_5_text})
PY=${PYTHON:-/usr/bin/python3}
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
g++ -std=c++17 -O1 -I"$SRC/include" -I"$SRC/ggml/include" "$ROOT/perf/gguf_peer_check.cpp" \
  -L"$BIN" -lllama -lggml -lggml-base -Wl,-rpath,"$BIN" -o "$WORK/check"
status=0
for m in "${MODELS[@]}"; do
  echo "== $(basename "$m")"
  PYTHONPATH="$SRC/gguf-py" "$PY" "$ROOT/perf/gguf_peer_model.py" "$m" "$WORK/m.gguf" --weights real >/dev/null
  "$PY" - "$WORK/check" "$WORK/m.gguf" "$m" <<'PY' || status=1
import json, subprocess, sys
import numpy as np
binary, gguf, folder = sys.argv[1:4]
ok = True
for i, p in enumerate(json.load(open(folder + "/golden.json"))["prompts"]):
    r = subprocess.run([binary, gguf, str(len(p["greedy_ids"])), ",".join(map(str, p["ids"]))],
                       capture_output=True, text=True, check=True)
    out = dict(line.split(" ", 1) for line in r.stdout.strip().split("\n"))
    logits = np.array(out["logits"].split(), dtype=np.float64)
    greedy = [int(x) for x in out["greedy"].split()]
    ref = np.array(p["last_logits"])
    err = np.abs(logits - ref).max() / np.abs(ref).max()
    same = greedy == p["greedy_ids"]
    ok &= same and err < 1e-3
    print(f"prompt {i}: {len(p['ids'])} ids, greedy {'identical' if same else 'DIFFER'} "
          f"({sum(a == b for a, b in zip(greedy, p['greedy_ids']))}/{len(greedy)}), last logits max err {err:.2e} of max |logit|")
    if not same:
        print("  peer  ", greedy, "\n  golden", p["greedy_ids"])
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
done
exit $status
