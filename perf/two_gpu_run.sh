#!/bin/bash
# Two GPUs of one host (issue 30): the llama3-8b 4-bit preset split over both (`--devices`, half the
# layers each) against one GPU — the same greedy ids, single-stream decode, and the aggregate of 16
# concurrent streaming clients (`sluice bench --server`) served by each placement. One device call
# (kind nvidia-h200-x2), carry [".bundle_spec"] (perf/speculative_peer_gpu.sh says how it is made).
set -u
source .bundle_spec/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_spec/bin; M=/tmp/llama3-8b-4bit
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; "$F/sluice" devices --plugin-dir "$F"; } > "$OUT/machine.txt" 2>&1
timeout 240 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $M > /dev/null 2>&1; log model
one="--backend opencl:0"; two="--devices opencl:0,opencl:1"
for p in one two; do
  timeout 120 "$F/sluice" generate --model $M ${!p} --plugin-dir "$F" --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 128 --ignore-eos \
    --json > "$OUT/generate_$p.txt" 2> "$OUT/generate_${p}_err.txt"; log "generate $p"
done
python3 -c 'import json,sys; a,b=(json.loads(open(f).read().strip().splitlines()[-1])["ids"] for f in sys.argv[1:]); print("greedy ids: same" if a==b else "greedy ids: DIFFERENT", len(a))' \
  "$OUT/generate_one.txt" "$OUT/generate_two.txt" >> "$OUT/progress.txt" 2>&1
for p in one two; do
  setsid "$F/sluice" serve --model $M ${!p} --plugin-dir "$F" --port 8090 --parallel 16 --ctx-size 8192 > "$OUT/serve_$p.txt" 2>&1 < /dev/null &
  pid=$!
  for i in $(seq 1 120); do curl -sf http://127.0.0.1:8090/health > /dev/null && break; sleep 1; done
  timeout 150 "$F/sluice" bench --server http://127.0.0.1:8090 --clients 16 --requests 64 --gen 128 >> "$OUT/bench_server.txt" 2>&1
  log "served $p"; kill $pid; wait $pid 2>/dev/null
done
