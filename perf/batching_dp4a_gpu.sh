#!/bin/bash
# The dp4a batch kernel (matvec_q4_batch_dp4a) on the GPU machine, one device call (~4 minutes): its
# correctness there (the float64-referenced product test, concurrent requests equal each alone), the
# product alone at each batch size and shape against the float batch kernel, then bench_batching.
# Here first: ../shared/device/bundle.sh .bundle3 build/bin/sluice build/bin/bench_batching \
#   build/bin/bench_quant_matvec build/lib/sluice-backend-opencl.so build/bin/batching_test \
#   build/bin/opencl_vendor_paths_test
# Device call (carry [".bundle3"]): bash perf/batching_dp4a_gpu.sh
set -u
source .bundle3/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle3/bin
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
MODEL=/tmp/llama3-8b-4bit
( [ -d $MODEL ] || timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $MODEL > /dev/null 2>&1 ) &
# The tests look for the paths they were built with.
mkdir -p /work && ln -sfn $PWD /work/main; mkdir -p build && ln -sfn "$F" build/lib
timeout 120 "$F/opencl_vendor_paths_test" --gtest_filter='*Batched*' > "$OUT/t_vendor.txt" 2>&1; echo "vendor rc=$?" >> "$OUT/progress.txt"
timeout 120 "$F/batching_test" --gtest_filter='*OpenCl*' > "$OUT/t_batching.txt" 2>&1; echo "batching rc=$?" >> "$OUT/progress.txt"
log tests
mv_run() {  # rows cols batch options
  printf "rows %s cols %s batch %s opts '%s': " "$1" "$2" "$3" "$4" >> "$OUT/matvec.txt"
  timeout 60 "$F/bench_quant_matvec" --backend opencl --plugin-dir "$F" --backend-options "$4" --bits 4 \
    --rows "$1" --cols "$2" --prefill "$3" --reps 50 2>&1 | grep "^| 4-bit" | tr '\n' ' ' >> "$OUT/matvec.txt"
  echo >> "$OUT/matvec.txt"
}
B=tune.q4_batch_max_rows=64
for n in 2 4 8 16 32; do
  for opts in "$B" "$B,tune.q4_batch_team_rows=1" "$B,tune.q4_batch_team_rows=4" "$B,tune.q4_batch_chunk=4" "$B,tune.q4_batch_chunk=16"; do
    mv_run 14336 4096 $n "$opts"
  done
  for shape in "4096 14336" "4096 4096"; do
    mv_run $shape $n "$B"
    mv_run $shape $n "$B,tune.q4_batch_team_rows=4"
  done
  mv_run 14336 4096 $n "$B,tune.q4_batch_dp4a=0,tune.q4_batch_team_rows=4"
done
log matvec
wait; log model
for lim in 8 16 32; do
  timeout 100 "$F/bench_batching" --model $MODEL --backend opencl --plugin-dir "$F" --backend-options "tune.q4_batch_max_rows=$lim" \
    --gen 64 --streams 1,2,4,8,16,32 > "$OUT/ours_max$lim.txt" 2>&1
  log ours $lim
done
SLUICE_OPENCL_PROFILE=1 SLUICE_OPENCL_HOST_TIMING=1 timeout 90 "$F/bench_batching" --model $MODEL --backend opencl \
  --plugin-dir "$F" --backend-options "tune.q4_batch_max_rows=32" --gen 32 --streams 8 > "$OUT/prof_8.txt" 2>&1
log prof 8
