#!/bin/bash
# Where a batched decode step's time goes on the GPU machine (issue 30), one device call, ~4 minutes:
# the batched 4-bit product alone at each batch size and kernel shape (bench_quant_matvec), then
# bench_batching at two batch-kernel limits, and profiled (SLUICE_OPENCL_PROFILE: per-kernel time,
# launch gaps, host waits).
# Here first: ../shared/device/bundle.sh .bundle3 build/bin/sluice build/bin/bench_batching \
#   build/bin/bench_quant_matvec build/lib/sluice-backend-opencl.so
# Device call (carry [".bundle3"]): bash perf/batching_probe_gpu.sh
set -u
source .bundle3/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle3/bin
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
MODEL=/tmp/llama3-8b-4bit
( [ -d $MODEL ] || timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $MODEL > /dev/null 2>&1 ) &
mv_run() {  # rows cols batch options
  printf "rows %s cols %s batch %s opts '%s': " "$1" "$2" "$3" "$4" >> "$OUT/matvec.txt"
  timeout 60 "$F/bench_quant_matvec" --backend opencl --plugin-dir "$F" --backend-options "$4" --bits 4 \
    --rows "$1" --cols "$2" --prefill "$3" --reps 50 2>&1 | grep "^| 4-bit" | tr '\n' ' ' >> "$OUT/matvec.txt"
  echo >> "$OUT/matvec.txt"
}
B=tune.q4_batch_max_rows=64
for n in 2 4 8 16 32; do
  for opts in "$B" "$B,tune.q4_batch_team_rows=1" "$B,tune.q4_batch_team_rows=4" "$B,tune.q4_batch_chunk=4" \
              "$B,tune.q4_batch_chunk=16" "$B,tune.q4_batch_chunk=4,tune.q4_batch_team_rows=4"; do
    mv_run 14336 4096 $n "$opts"
  done
  mv_run 4096 14336 $n "$B"
  mv_run 4096 14336 $n "$B,tune.q4_batch_team_rows=4"
  mv_run 4096 4096 $n "$B"
  mv_run 4096 4096 $n "$B,tune.q4_batch_team_rows=4"
done
for n in 16 32; do
  for shape in "14336 4096" "4096 14336" "4096 4096"; do
    mv_run $shape $n "tune.q4_batch_max_rows=0"
    mv_run $shape $n "tune.q4_batch_max_rows=0,tune.mma_bm=64"
  done
done
log matvec
wait; log model
for lim in 8 32; do
  timeout 120 "$F/bench_batching" --model $MODEL --backend opencl --plugin-dir "$F" --backend-options "tune.q4_batch_max_rows=$lim" \
    --gen 64 --streams 1,2,4,8,16,32 > "$OUT/ours_max$lim.txt" 2>&1
  log ours $lim
done
for s in 2 8; do
  SLUICE_OPENCL_PROFILE=1 SLUICE_OPENCL_HOST_TIMING=1 timeout 90 "$F/bench_batching" --model $MODEL --backend opencl \
    --plugin-dir "$F" --gen 32 --streams $s > "$OUT/prof_$s.txt" 2>&1
  log prof $s
done
