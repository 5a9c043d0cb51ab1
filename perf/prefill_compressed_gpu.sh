#!/bin/bash
# Prefill over compressed caches at depth on tensor cores (issue 30: turbo3 at 32768 was 0.08× the
# peer), beside llama.cpp's llama-bench in the same sitting. Two device calls back to back (the machine
# keeps /tmp while calls follow each other); perf/batching_mma_gpu.sh's `measure` can follow them (the
# same bundle, model, GGUF and peer build):
#   start  the peer's CUDA build (detached: llama-bench, llama-batched-bench, llama-server), our
#          llama3-8b 4-bit model and the peer's Q4_0 GGUF of it (perf/gguf_peer_model.py); while the
#          peer builds, the GPU tests of the paths this measures (tensor-core attention over turbo and
#          q8 caches with a recent window against the portable kernels; the f16 one against float64)
#   depth  bench_depth (pp512 and tg32 at depth 0, 8192, 32768; random K/V fill) with the f16 cache,
#          turbo3 (its default recent window of 16), turbo3 without the window, and the --turbo-kv pair,
#          then llama-bench with its f16 and turbo3 caches at the same depths (-p 512 -n 32), then ours
#   again  ours again (f16, turbo3) for the spread; a kernel profile of a turbo3 prefill at 32768
#   sweep  (after start) attention_mma with 64 and 128 queries a work-group (tuning mma_att_queries), f16
#          and turbo3 at the three depths, alternating, with llama-bench's f16 and turbo3 between
# Here first (bundles are ignored by git):
#   ../shared/device/bundle.sh .bundle_mma build/bin/sluice build/bin/bench_batching build/bin/bench_quant_matvec \
#     build/bin/bench_depth build/lib/sluice-backend-opencl.so build/lib/sluice-kvcodec-turbo3.so \
#     build/lib/sluice-kvcodec-turbo4.so build/lib/sluice-kvcodec-q8.so build/bin/batching_test \
#     build/bin/opencl_vendor_paths_test build/bin/opencl_mma_attention_test build/bin/opencl_mma_attention_compressed_test
#   strip .bundle_mma/bin/*; mkdir -p .bundle_pack && tar -cJf .bundle_pack/bundle_mma.tar.xz .bundle_mma
#   mkdir -p .peer && cp ../shared/peer/llama-cpp-turboquant.tar.gz .peer/
# Device calls (carry [".bundle_pack", ".peer"]): bash perf/prefill_compressed_gpu.sh start, then depth, again.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d .bundle_mma ] || tar -xJf .bundle_pack/bundle_mma.tar.xz
source .bundle_mma/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_mma/bin; M=/tmp/llama3-8b-4bit; R=/tmp/pcomp; W=/tmp/peer-batch; G=/tmp/peer-l8-q4_0.gguf
mkdir -p $R
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
trap 'tar -czf "$OUT/pcomp.tar.gz" -C $R . 2>/dev/null' EXIT
case "${1:-}" in
start)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt 2>&1
  if [ ! -f $W/build.log ]; then
    mkdir -p $W && tar xzf .peer/llama-cpp-turboquant.tar.gz -C $W
    setsid bash -c "cmake -S $W/lcpp -B $W/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_WEBUI=OFF -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release > $W/build.log 2>&1 && \
      cmake --build $W/build -j14 --target llama-bench llama-batched-bench llama-server >> $W/build.log 2>&1; \
      echo BUILD_RC=\$? >> $W/build.log" > /dev/null 2>&1 < /dev/null &
  fi
  ( [ -f $M/config.json ] || ( time timeout 240 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $M --quiet ) > $R/make_model.txt 2>&1
    [ -f $G ] || ( time PYTHONPATH=$W/lcpp/gguf-py timeout 200 python3 perf/gguf_peer_model.py $M $G ) > $R/gguf.txt 2>&1 ) &
  # The tests look for the paths they were built with.
  mkdir -p /work && ln -sfn $PWD /work/main; mkdir -p build && ln -sfn "$F" build/lib
  timeout 200 "$F/opencl_mma_attention_compressed_test" > $R/t_compressed.txt 2>&1; log "compressed rc=$?"
  timeout 120 "$F/opencl_mma_attention_test" > $R/t_mma.txt 2>&1; log "mma rc=$?"
  # The same two with 128 queries a work-group (tuning mma_att_queries; the sweep phase times it).
  SLUICE_TEST_BACKEND_OPTIONS=tune.mma_att_queries=128 timeout 200 "$F/opencl_mma_attention_compressed_test" \
    > $R/t_compressed_q128.txt 2>&1; log "compressed q128 rc=$?"
  SLUICE_TEST_BACKEND_OPTIONS=tune.mma_att_queries=128 timeout 120 "$F/opencl_mma_attention_test" > $R/t_mma_q128.txt 2>&1
  log "mma q128 rc=$?"
  [ "${SKIP_VENDOR:-0}" = 1 ] || timeout 150 "$F/opencl_vendor_paths_test" --gtest_filter='*Batched*:*TensorCore*' > $R/t_vendor.txt 2>&1; log "vendor rc=$?"
  wait; log "model and gguf"
  tail -n 2 $W/build.log $R/make_model.txt $R/gguf.txt | tee -a "$OUT/progress.txt"
  log start done ;;
depth|again)
  ours() {  # label codec [extra options]
    timeout 150 "$F/bench_depth" --model $M --backend opencl --plugin-dir "$F" --kv-codec "$2" --depths 0,8192,32768 \
      --pp 512 --tg 32 --json ${3:-} > $R/ours_$1.txt 2>&1
    log "ours $1 rc=$?"
  }
  [ "$1" = again ] && { ours f16_2 f16; ours turbo3_2 turbo3; SLUICE_OPENCL_PROFILE=1 timeout 90 "$F/bench_depth" --model $M \
    --backend opencl --plugin-dir "$F" --kv-codec turbo3 --depths 32768 --pp 512 --tg 4 > $R/prof_turbo3_32k.txt 2>&1;
    log "again done"; exit 0; }
  ours f16_1 f16
  ours turbo3_1 turbo3
  ours turbo3_w0 turbo3 "--kv-recent 0"
  ours turbo43_1 k=turbo4,v=turbo3
  for i in $(seq 1 100); do grep -q BUILD_RC $W/build.log 2>/dev/null && break; sleep 3; done
  tail -n 1 $W/build.log | tee -a "$OUT/progress.txt"
  for ct in f16 turbo3; do
    timeout 240 $W/build/bin/llama-bench -m $G -ngl 99 -fa 1 -ctk $ct -ctv $ct -p 512 -n 32 -d 0,8192,32768 -r 2 -o md \
      > $R/peer_$ct.txt 2>&1
    log "peer $ct rc=$?"
  done
  log "depth done" ;;
sweep)  # attention_mma with 64 and 128 queries a work-group, alternating, and the peer between
  q() {  # label codec queries
    timeout 150 "$F/bench_depth" --model $M --backend opencl --plugin-dir "$F" --kv-codec "$2" --depths 0,8192,32768 \
      --pp 512 --tg 32 --json --backend-options tune.mma_att_queries=$3 > $R/sweep_$1_$2_q$3.txt 2>&1
    log "sweep $1 $2 q$3 rc=$?"
  }
  for codec in f16 turbo3; do q 1 $codec 64; q 1 $codec 128; done
  for i in $(seq 1 100); do grep -q BUILD_RC $W/build.log 2>/dev/null && break; sleep 3; done
  for ct in f16 turbo3; do
    timeout 240 $W/build/bin/llama-bench -m $G -ngl 99 -fa 1 -ctk $ct -ctv $ct -p 512 -n 32 -d 0,8192,32768 -r 2 -o md \
      > $R/sweep_peer_$ct.txt 2>&1
    log "peer $ct rc=$?"
  done
  for codec in f16 turbo3; do q 2 $codec 128; q 2 $codec 64; done
  log "sweep done" ;;
*) echo "usage: $0 start|depth|again|sweep" >&2; exit 2 ;;
esac
