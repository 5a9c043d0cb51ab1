#!/bin/bash
# The committed form on the H200: the tensor-core GPU tests, the concurrent-requests test, and
# bench_batching with products of one input in one launch and without (alternating), one profile.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"; R=/tmp/fin; mkdir -p $R
trap 'tar -czf "$OUT/final.tar.gz" -C $R . 2>/dev/null' EXIT
[ -d .bundle_mma ] || tar -xJf .bundle_pack/bundle_mma.tar.xz
source .bundle_mma/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_mma/bin; M=/tmp/llama3-8b-4bit
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$R/progress.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt 2>&1
( timeout 240 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $M --quiet ) > $R/make_model.txt 2>&1 &
mkdir -p /work && ln -sfn $PWD /work/main; mkdir -p build && ln -sfn "$F" build/lib
mkdir -p "$(dirname "$PWD")/shared/models" && ln -sfn "$PWD/.bundle_pack/tiny-code-qwen2-4bit" "$(dirname "$PWD")/shared/models/"
timeout 200 "$F/opencl_vendor_paths_test" --gtest_filter='*OnTensorCores*' > $R/t_vendor.txt 2>&1; log "vendor rc=$?"
timeout 60 "$F/batching_test" --gtest_filter='*OpenCl*' > $R/t_batching.txt 2>&1; log "batching rc=$?"
wait; log model
for run in multi0_1=tune.q4_batch_mma_multi=0 parts_1= multi0_2=tune.q4_batch_mma_multi=0 parts_2=; do
  timeout 100 "$F/bench_batching" --model $M --backend opencl --plugin-dir "$F" --backend-options "${run#*=}" --gen 64 \
    --streams 1,2,4,8,16,32 > $R/ours_${run%%=*}.txt 2>&1; log "ours ${run%%=*}"
done
SLUICE_OPENCL_PROFILE=1 timeout 60 "$F/bench_batching" --model $M --backend opencl --plugin-dir "$F" --gen 32 --streams 8 > $R/prof_8.txt 2>&1
log done
