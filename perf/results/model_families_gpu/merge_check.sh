#!/bin/bash
# The session's merged main (model families, per-layer OpenCL caches) on the GPU: greedy text of
# llama3-8b 4-bit against d09647d's (before the merges), the OpenCL tests on NVIDIA (the new families'
# goldens included), decode/prefill alternately with d09647d.
set -u
source .bundle/activate.sh; export SLUICE_CACHE_DIR=/tmp/sluice-cache SLUICE_REFERENCE_DIR=$PWD/.bundle2/ref
F=$PWD/.bundle/bin; M=$PWD/.bundle/main/bin
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/progress.txt"; }
start=$(date +%s); left() { echo $(( 560 - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/summary.txt" 2>&1
MODEL=/tmp/llama3-8b-4bit
timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $MODEL > /dev/null 2>&1; log model
for b in main new; do
  d=$F; [ $b = main ] && d=$M
  timeout 90 "$d/sluice" generate --model $MODEL --backend opencl --plugin-dir "$d" --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 48 --ignore-eos > "$OUT/generate_$b.txt" 2>&1
done
cmp -s <(grep -v tok/s "$OUT/generate_main.txt") <(grep -v tok/s "$OUT/generate_new.txt") && echo "greedy text d09647d/new: same" >> "$OUT/summary.txt" || echo "greedy text d09647d/new: DIFFERENT" >> "$OUT/summary.txt"
grep -h "tok/s" "$OUT"/generate_*.txt >> "$OUT/summary.txt"
mkdir -p /work/main/build && ln -sfn "$F" /work/main/build/lib
for t in opencl_conformance_test opencl_vendor_paths_test opencl_backend_ops_test opencl_mma_attention_test opencl_fused_attention_test; do
  [ "$(left)" -lt 200 ] && break
  s=$(date +%s); timeout 150 "$F/$t" > "$OUT/t_$t.txt" 2>&1; echo "== $t rc=$? in $(( $(date +%s) - s )) s" >> "$OUT/summary.txt"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure' "$OUT/t_$t.txt" | head -12 >> "$OUT/summary.txt"
  grep -q FAILED "$OUT/t_$t.txt" || rm -f "$OUT/t_$t.txt"
done
log tests
for b in new main new main; do
  [ "$(left)" -lt 45 ] && break
  d=$F; [ $b = main ] && d=$M
  echo "== bench $b" >> "$OUT/summary.txt"
  timeout 40 "$d/bench_depth" --model $MODEL --backend opencl --plugin-dir "$d" --depths 0,32768 --pp 512 --tg 128 --reps 4 >> "$OUT/summary.txt" 2>&1
  log "bench $b"
done
