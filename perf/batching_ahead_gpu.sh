#!/bin/bash
# Greedy sequences decoded a token ahead together (issue 30) on the GPU machine, one device call (~2
# minutes): bench_batching with the engine's decode-ahead on (auto: the OpenCL backend queues its ops)
# and off, alternating, same binary and model.
# Here first: ../shared/device/bundle.sh .bundle3 build/bin/sluice build/bin/bench_batching build/lib/sluice-backend-opencl.so
# Device call (carry [".bundle3"]): bash perf/batching_ahead_gpu.sh
set -u
source .bundle3/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle3/bin
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
MODEL=/tmp/llama3-8b-4bit
[ -d $MODEL ] || timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $MODEL > /dev/null 2>&1; log model
for round in 1 2; do
  for ahead in auto off; do
    timeout 100 "$F/bench_batching" --model $MODEL --backend opencl --plugin-dir "$F" --decode-ahead $ahead --gen 64 \
      --streams 1,2,4,8,16,32 > "$OUT/ahead_${ahead}_$round.txt" 2>&1
    log "$ahead $round"
  done
done
