#!/bin/bash
# Batched decode on the GPU machine (issue 30), two device calls back to back (the machine and its /tmp
# stay while calls follow each other; the peer's build is detached and outlives the first call):
#   start    the peer's build and model in the background; meanwhile the batch kernels' correctness
#            there (the float64-referenced product test for every chunk/team shape, float and dp4a;
#            concurrent requests of the 4-bit model equal each alone) and a profiled run (~3 minutes)
#   measure  waits for the peer (the build takes ~10 minutes in all), then, on a quiet machine (the host
#            issues the launches, so a busy CPU slows ours): bench_batching, llama-batched-bench, and
#            bench_batching again while the call's time allows
#
# Here, first (the bundle is ignored by git):
#   ../shared/device/bundle.sh .bundle3 build/bin/sluice build/bin/bench_batching build/bin/bench_quant_matvec \
#     build/lib/sluice-backend-opencl.so build/bin/batching_test build/bin/opencl_vendor_paths_test
#   mkdir -p .bundle3/ref/models && cp -r ../shared/models/tiny-code-qwen2-4bit .bundle3/ref/models/
# Device calls (kind nvidia-h100-x1, carry [".bundle3", ".peer"]): bash perf/batching_gpu_run.sh start,
# then at once bash perf/batching_gpu_run.sh measure.
set -u
source .bundle3/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle3/bin
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
MODEL=/tmp/llama3-8b-4bit
bench() { timeout 150 "$F/bench_batching" --model $MODEL --backend opencl --plugin-dir "$F" --gen 64 --streams 1,2,4,8,16,32 > "$OUT/$1.txt" 2>&1; log "$1"; }
case "${1:-}" in
start)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
  OUT=/tmp/peer_out setsid bash .peer/llamacpp_gpu.sh prepare > /tmp/peer_prepare.txt 2>&1 < /dev/null &
  [ -d $MODEL ] || timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $MODEL > /dev/null 2>&1; log model
  # The tests look for the paths they were built with.
  mkdir -p /work && ln -sfn $PWD /work/main; mkdir -p build && ln -sfn "$F" build/lib; ln -sfn $PWD/.bundle3/ref /work/shared
  timeout 150 "$F/opencl_vendor_paths_test" --gtest_filter='*Batched*' > "$OUT/t_vendor.txt" 2>&1; echo "vendor rc=$?" >> "$OUT/progress.txt"
  timeout 150 "$F/batching_test" --gtest_filter='*OpenCl*' > "$OUT/t_batching.txt" 2>&1; echo "batching rc=$?" >> "$OUT/progress.txt"
  grep -E "^\[  (PASSED|FAILED|SKIPPED)|Failure" "$OUT/t_vendor.txt" "$OUT/t_batching.txt" | head -20 >> "$OUT/progress.txt"
  log tests
  SLUICE_OPENCL_PROFILE=1 SLUICE_OPENCL_HOST_TIMING=1 timeout 90 "$F/bench_batching" --model $MODEL --backend opencl \
    --plugin-dir "$F" --gen 32 --streams 8 > "$OUT/prof_8_during_peer_build.txt" 2>&1
  log prof
  # The peer's f16 model written whole before this call ends (its conversion is not detached).
  for i in $(seq 1 60); do [ -f /tmp/peer/l8-f16.gguf ] && [ ! -d /tmp/peer/hf ] && break; sleep 5; done; log peer_model ;;
measure)
  # The first call's prepare goes on detached (build, then quantize); run it here only if it is gone
  # without its model (two at once would write one file).
  for i in $(seq 1 100); do pgrep -f "llamacpp_gpu.sh prepare" > /dev/null || break; sleep 5; done
  grep -q l8-q4_0.gguf /tmp/peer_prepare.txt 2>/dev/null || bash .peer/llamacpp_gpu.sh prepare >> /tmp/peer_prepare.txt 2>&1
  cp /tmp/peer_prepare.txt "$OUT/"; log peer_built
  bench ours
  OUT=$OUT bash .peer/llamacpp_gpu.sh batch > /dev/null 2>&1; log peer
  [ $SECONDS -lt 500 ] && bench ours_after_peer ;;
*) echo "usage: $0 start|measure" >&2; exit 2 ;;
esac
