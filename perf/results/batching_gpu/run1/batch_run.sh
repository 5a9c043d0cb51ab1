#!/bin/bash
# Batched decode on the GPU: the new 4-bit batch kernel's correctness there, then bench_batching against
# llama-batched-bench (peer built in the background meanwhile), ours timed again after the peer.
set -u
source .bundle3/activate.sh; export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle3/bin
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/progress.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/summary.txt" 2>&1
OUT=$OUT setsid bash .peer/llamacpp_gpu.sh prepare > "$OUT/peer_prepare.txt" 2>&1 < /dev/null &
PREP=$!
MODEL=/tmp/llama3-8b-4bit
timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $MODEL > /dev/null 2>&1; log model
# tests: paths compiled for /work/main
mkdir -p /work && ln -sfn $PWD /work/main; mkdir -p build && ln -sfn "$F" build/lib; ln -sfn $PWD/.bundle3/ref /work/shared
timeout 60 "$F/opencl_conformance_test" > "$OUT/t_conformance.txt" 2>&1; echo "conformance rc=$?" >> "$OUT/summary.txt"
grep -E "matmul q4|FAIL" "$OUT/t_conformance.txt" >> "$OUT/summary.txt"
timeout 90 "$F/batching_test" --gtest_filter='*OpenCl*' > "$OUT/t_batching.txt" 2>&1; echo "batching_test rc=$?" >> "$OUT/summary.txt"
grep -E "^\[  (PASSED|FAILED)|OK \]|Failure" "$OUT/t_batching.txt" >> "$OUT/summary.txt"; log tests
timeout 120 "$F/bench_batching" --model $MODEL --backend opencl --gen 64 --streams 1,2,4,8,16,32,64 > "$OUT/ours_during_build.txt" 2>&1; log ours1
timeout 60 "$F/bench_batching" --model $MODEL --backend opencl --backend-options tune.q4_batch_chunk=16 --gen 64 --streams 8,16,32,64 > "$OUT/ours_chunk16.txt" 2>&1; log chunk16
wait $PREP; log prepared
bash .peer/llamacpp_gpu.sh batch > /dev/null 2>&1; log peer
timeout 120 "$F/bench_batching" --model $MODEL --backend opencl --gen 64 --streams 1,2,4,8,16,32,64 > "$OUT/ours_after_peer.txt" 2>&1; log ours2
