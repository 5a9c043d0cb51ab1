#!/bin/bash
# Call 3 (H100, warm): the fusion build's vendor-path and fused-attention tests, greedy text against
# main's, then decode/prefill alternately with more repetitions (noise at depth 0 was ±14 with 3).
set -u
source .bundle/activate.sh; export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle/bin; M=$PWD/.bundle/main/bin
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/progress.txt"; }
start=$(date +%s); left() { echo $(( 585 - ($(date +%s) - start) )); }
MODEL=/tmp/llama3-8b-4bit
[ -d $MODEL ] || timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $MODEL > /dev/null 2>&1
mkdir -p /work/fuse/build && ln -sfn "$F" /work/fuse/build/lib
for t in opencl_vendor_paths_test; do
  s=$(date +%s); timeout 120 "$F/$t" > "$OUT/t_$t.txt" 2>&1; echo "== $t rc=$? in $(( $(date +%s) - s )) s" >> "$OUT/summary.txt"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure' "$OUT/t_$t.txt" | head -12 >> "$OUT/summary.txt"
  grep -q FAILED "$OUT/t_$t.txt" || rm -f "$OUT/t_$t.txt"
done
timeout 90 "$F/sluice" generate --model $MODEL --backend opencl --plugin-dir "$F" --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 48 --ignore-eos > "$OUT/generate_fuse.txt" 2>&1
timeout 90 "$M/sluice" generate --model $MODEL --backend opencl --plugin-dir "$M" --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 48 --ignore-eos > "$OUT/generate_main.txt" 2>&1
cmp -s <(grep -v tok/s "$OUT/generate_main.txt") <(grep -v tok/s "$OUT/generate_fuse.txt") && echo "greedy text main/fuse: same" >> "$OUT/summary.txt" || echo "greedy text main/fuse: DIFFERENT" >> "$OUT/summary.txt"
log tests
for b in fuse main fuse main fuse main; do
  [ "$(left)" -lt 200 ] && break
  d=$F; [ $b = main ] && d=$M
  echo "== bench $b" >> "$OUT/summary.txt"
  timeout 60 "$d/bench_depth" --model $MODEL --backend opencl --plugin-dir "$d" --depths 0,8192,32768 --pp 512 --tg 128 --reps 8 >> "$OUT/summary.txt" 2>&1
  log "bench $b"
done
s=$(date +%s); timeout $(( $(left) - 10 )) "$F/opencl_fused_attention_test" > "$OUT/t_fused.txt" 2>&1; echo "== fused attention rc=$? in $(( $(date +%s) - s )) s" >> "$OUT/summary.txt"
grep -E '^\[  (PASSED|FAILED|SKIPPED|       OK) |Failure' "$OUT/t_fused.txt" | head -20 >> "$OUT/summary.txt"
