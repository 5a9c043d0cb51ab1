#!/bin/bash
# Third device call: decode/prefill of llama3-8b 4-bit after the four-rows-per-team 4-bit matvec.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source .bundle/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
B=.bundle/bin
MODEL=/tmp/llama3-8b-4bit
[ -f $MODEL/config.json ] || ( time timeout 150 sluice make-model --preset llama3-8b --bits 4 --out $MODEL ) > "$OUT/make_model.txt" 2>&1
timeout 60 sluice conformance --backend opencl --plugin-dir $B --quick 2>/dev/null | grep -E "matmul q4|all ops|FAIL" > "$OUT/conformance_q4.txt"
SLUICE_OPENCL_PROFILE=1 timeout 150 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --depths 0,8192 --pp 512 --tg 64 --json > "$OUT/bench.txt" 2>&1
