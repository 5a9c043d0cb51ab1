#!/bin/bash
# The H100 (the GPU machine of the figures): main against abi2, bench_depth and greedy text, the
# abi2 OpenCL tests, and the fused-attention test of both builds (timed, it is host-bound there).
set -u
source .bundle/activate.sh; export SLUICE_CACHE_DIR=/tmp/sluice-cache
A=$PWD/.bundle/bin; M=$PWD/.bundle/main/bin
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/progress.txt"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/summary.txt" 2>&1
MODEL=/tmp/llama3-8b-4bit
timeout 200 "$A/sluice" make-model --preset llama3-8b --bits 4 --out $MODEL > /dev/null 2>&1; log model
for b in main abi2; do
  d=$A; [ $b = main ] && d=$M
  timeout 90 "$d/sluice" generate --model $MODEL --backend opencl --plugin-dir "$d" --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 48 --ignore-eos > "$OUT/generate_$b.txt" 2>&1
done
cmp -s <(grep -v tok/s "$OUT/generate_main.txt") <(grep -v tok/s "$OUT/generate_abi2.txt") && echo "greedy text: same" >> "$OUT/summary.txt" || echo "greedy text: DIFFERENT" >> "$OUT/summary.txt"
for b in main abi2 main abi2; do
  d=$A; [ $b = main ] && d=$M
  echo "== bench $b" >> "$OUT/summary.txt"
  timeout 150 "$d/bench_depth" --model $MODEL --backend opencl --plugin-dir "$d" --depths 0,8192,32768 --pp 512 --tg 128 --reps 3 >> "$OUT/summary.txt" 2>&1
  log "bench $b"
done
mkdir -p /work/abi2/build && ln -sfn "$A" /work/abi2/build/lib
for t in opencl_vendor_paths_test opencl_mma_attention_test opencl_backend_ops_test; do
  timeout 150 "$A/$t" > "$OUT/t.txt" 2>&1; echo "== $t rc=$?" >> "$OUT/summary.txt"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure' "$OUT/t.txt" | head -8 >> "$OUT/summary.txt"
done
log tests
for b in main abi2; do
  d=$A; [ $b = main ] && d=$M
  mkdir -p /work/main/build-final && ln -sfn "$M" /work/main/build-final/lib
  s=$(date +%s); timeout 150 "$d/opencl_fused_attention_test" > "$OUT/t.txt" 2>&1; rc=$?
  echo "== fused attention $b rc=$rc in $(( $(date +%s) - s )) s" >> "$OUT/summary.txt"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure' "$OUT/t.txt" | head -5 >> "$OUT/summary.txt"
done
rm -f "$OUT/t.txt"; log done
