#!/bin/bash
# Why do 2..8 concurrent streams collapse on the GPU? bench_batching per stream count, profiled.
set -u
source .bundle3/activate.sh; export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle3/bin
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/progress.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/summary.txt" 2>&1
MODEL=/tmp/llama3-8b-4bit
[ -d $MODEL ] || timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $MODEL > /dev/null 2>&1; log model
timeout 60 "$F/bench_batching" --model $MODEL --backend opencl --gen 32 --streams 1,2,4,8,16 > "$OUT/plain.txt" 2>&1; log plain
for s in 1 2; do
  SLUICE_OPENCL_PROFILE=1 SLUICE_OPENCL_HOST_TIMING=1 timeout 60 "$F/bench_batching" --model $MODEL --backend opencl --gen 32 --streams $s > "$OUT/prof_$s.txt" 2>&1; log prof $s
done
