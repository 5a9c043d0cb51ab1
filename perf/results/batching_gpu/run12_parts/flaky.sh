#!/bin/bash
# The 4-bit concurrent-requests test under CPU contention (16 busy loops), alternating the backend with
# products of one input in one launch (new) and without (multi0): which one ever fails?
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d .bundle_mma ] || tar -xJf .bundle_pack/bundle_mma.tar.xz
source .bundle_mma/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_mma/bin
mkdir -p /work && ln -sfn $PWD /work/main
mkdir -p "$(dirname "$PWD")/shared/models" && ln -sfn "$PWD/.bundle_pack/tiny-code-qwen2-4bit" "$(dirname "$PWD")/shared/models/"
for v in multi0 new; do
  D=/tmp/plug_$v; rm -rf $D; mkdir -p $D
  for f in "$F"/*; do ln -s "$f" $D/; done
  if [ $v != new ]; then rm $D/sluice-backend-opencl.so; cp .bundle_pack/variants/$v.so $D/sluice-backend-opencl.so; fi
done
burn() { for i in $(seq 1 16); do ( while :; do :; done ) & done; }
mkdir -p build
for round in 1 2 3 4 5 6; do
  [ $round = 3 ] && burn
  for v in new multi0; do
    ln -sfn /tmp/plug_$v build/lib
    timeout 60 "$F/batching_test" --gtest_filter='*OpenClConcurrentRequestsOfAFourBit*' > $OUT/b_${v}_$round.txt 2>&1
    echo "round $round $v rc=$? $(grep -h 'request [0-9]' $OUT/b_${v}_$round.txt | tr '\n' ' ')" | tee -a $OUT/summary.txt
  done
done
kill $(jobs -p) 2>/dev/null
tar -czf $OUT/b.tar.gz -C $OUT --remove-files $(cd $OUT && ls b_*.txt)
