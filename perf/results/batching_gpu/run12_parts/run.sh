#!/bin/bash
# Which change makes the 4-bit concurrent-requests test differ on the H200: the tree before (old), the
# new backend with products of one input a launch each (multi0), the new one (new); then bench_batching.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d .bundle_mma ] || tar -xJf .bundle_pack/bundle_mma.tar.xz
source .bundle_mma/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_mma/bin; M=/tmp/llama3-8b-4bit
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
( [ -f $M/config.json ] || timeout 240 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $M --quiet ) > $OUT/make_model.txt 2>&1 &
mkdir -p /work && ln -sfn $PWD /work/main
mkdir -p "$(dirname "$PWD")/shared/models" && ln -sfn "$PWD/.bundle_pack/tiny-code-qwen2-4bit" "$(dirname "$PWD")/shared/models/"
for v in old multi0 new; do
  D=/tmp/plug_$v; rm -rf $D; mkdir -p $D
  for f in "$F"/*; do ln -s "$f" $D/; done
  if [ $v != new ]; then rm $D/sluice-backend-opencl.so; cp .bundle_pack/variants/$v.so $D/sluice-backend-opencl.so; fi
  mkdir -p build && ln -sfn $D build/lib
  timeout 120 "$F/batching_test" --gtest_filter='*OpenCl*' > $OUT/t_batching_$v.txt 2>&1; log "batching $v rc=$?"
done
wait; log model
for run in "new=" "xf32=tune.q4_batch_mma_x_f32_rows=32" "multi0=tune.q4_batch_mma_multi=0" "old=" "new2=" "xf32_2=tune.q4_batch_mma_x_f32_rows=32"; do
  v=${run%%=*}; o=${run#*=}; d=/tmp/plug_${v%%_2}; d=${d%2}; [ -d $d ] || d=/tmp/plug_new
  [ $v = old ] && d=/tmp/plug_old
  timeout 100 "$F/bench_batching" --model $M --backend opencl --plugin-dir $d --backend-options "$o" --gen 64 \
    --streams 1,2,4,8,16,32 > $OUT/ours_$v.txt 2>&1; log "ours $v"
done
