#!/bin/bash
# Batched decode on the GPU machine (issue 30), one device call: the batched 4-bit product alone
# (bench_quant_matvec, no model needed: seconds), then whole-model aggregate decode (bench_batching),
# then llama.cpp's llama-batched-bench on the same machine where the peer was prepared in this lease.
#
# Here, first (the bundle is ignored by git):
#   ../shared/device/bundle.sh .bundle3 build/bin/sluice build/bin/bench_batching build/bin/bench_quant_matvec \
#     build/lib/sluice-backend-opencl.so
# Device call (kind nvidia-h100-x1, carry [".bundle3", ".peer"]): bash perf/batching_gpu_run.sh
# With PEER=1 it starts `.peer/llamacpp_gpu.sh prepare` in the background first (8 minutes) and times
# the peer at the end; without it the call takes about 2 minutes.
#
# Predictions (perf/NOTES.md, "Batched decode"): a 14336 × 4096 4-bit product (29 MB) of 2 rows near
# one row's time (~15 µs at 2 TB/s); 8 rows within ~2× of it; the old path (tune.q4_batch_max_rows=0)
# ~270 µs at 2 rows. SLUICE_OPENCL_BUILD_LOG shows whether the kernel keeps its accumulators in
# registers (no "bytes stack frame").
set -u
source .bundle3/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle3/bin
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
[ "${PEER:-0}" = 1 ] && { OUT=$OUT setsid bash .peer/llamacpp_gpu.sh prepare > "$OUT/peer_prepare.txt" 2>&1 < /dev/null & }
# The product alone: rows 1 (decode), 2..64 (batch kernel), old path beside it.
for shape in "4096 4096" "14336 4096" "4096 14336"; do
  set -- $shape
  for n in 2 4 8 16 32 64; do
    for opts in "" "tune.q4_batch_max_rows=0"; do
      echo "== rows $1 cols $2 batch $n options '$opts'" >> "$OUT/matvec.txt"
      timeout 60 "$F/bench_quant_matvec" --backend opencl --plugin-dir "$F" --backend-options "$opts" --bits 4 \
        --rows "$1" --cols "$2" --prefill "$n" --reps 50 >> "$OUT/matvec.txt" 2>&1
    done
  done
done
log matvec
SLUICE_OPENCL_BUILD_LOG=1 SLUICE_OPENCL_NO_CACHE=1 timeout 60 "$F/bench_quant_matvec" --backend opencl --plugin-dir "$F" \
  --bits 4 --prefill 8 --reps 2 2>&1 | grep -A12 "matvec_q4_batch" > "$OUT/build_log.txt"
log build_log
MODEL=/tmp/llama3-8b-4bit
[ -d $MODEL ] || timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $MODEL > /dev/null 2>&1; log model
timeout 150 "$F/bench_batching" --model $MODEL --backend opencl --plugin-dir "$F" --gen 64 --streams 1,2,4,8,16,32 > "$OUT/ours.txt" 2>&1
log ours
if [ "${PEER:-0}" = 1 ]; then
  wait; OUT=$OUT bash .peer/llamacpp_gpu.sh batch > /dev/null 2>&1; log peer
  timeout 150 "$F/bench_batching" --model $MODEL --backend opencl --plugin-dir "$F" --gen 64 --streams 1,2,4,8,16,32 > "$OUT/ours_after_peer.txt" 2>&1
  log ours_after_peer
fi
