#!/bin/bash
# Second device call: where decode time goes (SLUICE_OPENCL_PROFILE=1 kernel times), PTX vs portable.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source .bundle/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
B=.bundle/bin
MODEL=/tmp/llama3-8b-4bit
[ -f $MODEL/config.json ] || ( time timeout 150 sluice make-model --preset llama3-8b --bits 4 --out $MODEL ) > "$OUT/make_model.txt" 2>&1
SLUICE_OPENCL_PROFILE=1 timeout 100 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --depths 0 --pp 512 --tg 32 > "$OUT/profile_ptx.txt" 2>&1
SLUICE_OPENCL_PORTABLE=1 timeout 100 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --depths 0 --pp 512 --tg 64 > "$OUT/portable.txt" 2>&1
