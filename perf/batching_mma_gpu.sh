#!/bin/bash
# Batched decode products on tensor cores (matvec_q4_batch_mma, issue 30) on the GPU machine, beside
# llama.cpp's llama-batched-bench timed in the same sitting. Two device calls back to back (the machine
# keeps /tmp while calls follow each other):
#   start    the peer's CUDA build of llama-batched-bench (detached, ~4–7 minutes), our llama3-8b 4-bit
#            model and the peer's Q4_0 GGUF of it (perf/gguf_peer_model.py); while the peer builds: the
#            GPU tests of the batch kernels (float64 references; concurrent requests equal each alone)
#            and the product alone (bench_quant_matvec --prefill N, µs a product) for each batch size,
#            matrix shape and kernel shape, against the dp4a batch kernel (tune.q4_batch_mma=0)
#   measure  bench_batching (1..32 streams) with the tensor-core kernel and without, the peer's
#            llama-batched-bench (-npp 32 -ntg 64, its S_TG), ours again; a profiled 8- and 32-stream run
# Environment: SWEEP_OPTS (option sets for start's product timings, one a line; $B is the batch limits,
# $K keeps the tuned m-warps), SWEEP_ROWS, SWEEP_SHAPES ("14336x4096 …"); RUNS ("label=options …",
# measure's whole-model runs), PROFILE_STREAMS; VENDOR_FILTER (the GPU tests start runs).
#   served   (a third call, optional) the served load of perf/served_peer_gpu.sh, ours and llama-server
# Here first (bundles are ignored by git; the tracked tree leaves ~26 MB of the 64 MiB a call carries):
#   ../shared/device/bundle.sh .bundle_mma build/bin/sluice build/bin/bench_batching build/bin/bench_quant_matvec \
#     build/lib/sluice-backend-opencl.so build/bin/batching_test build/bin/opencl_vendor_paths_test
#   strip .bundle_mma/bin/*; mkdir -p .bundle_pack && tar -cJf .bundle_pack/bundle_mma.tar.xz .bundle_mma
#   cp -r ../shared/models/tiny-code-qwen2-4bit .bundle_pack/
#   mkdir -p .peer && cp ../shared/peer/llama-cpp-turboquant.tar.gz .peer/
# Device calls (carry [".bundle_pack", ".peer"]): bash perf/batching_mma_gpu.sh start, then measure at once
# (a machine idle for ~30 s goes back, and with it the peer's build: measure then waits for nothing).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d .bundle_mma ] || tar -xJf .bundle_pack/bundle_mma.tar.xz
source .bundle_mma/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_mma/bin; M=/tmp/llama3-8b-4bit; R=/tmp/bmma; W=/tmp/peer-batch; G=/tmp/peer-l8-q4_0.gguf
mkdir -p $R
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
trap 'tar -czf "$OUT/bmma.tar.gz" -C $R . 2>/dev/null' EXIT
case "${1:-}" in
start)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt 2>&1
  if [ ! -f $W/build.log ]; then
    mkdir -p $W && tar xzf .peer/llama-cpp-turboquant.tar.gz -C $W
    setsid bash -c "cmake -S $W/lcpp -B $W/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_WEBUI=OFF -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release > $W/build.log 2>&1 && \
      cmake --build $W/build -j14 --target llama-batched-bench llama-server >> $W/build.log 2>&1; echo BUILD_RC=\$? >> $W/build.log" \
      > /dev/null 2>&1 < /dev/null &
  fi
  ( [ -f $M/config.json ] || ( time timeout 240 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $M --quiet ) > $R/make_model.txt 2>&1
    [ -f $G ] || ( time PYTHONPATH=$W/lcpp/gguf-py timeout 200 python3 perf/gguf_peer_model.py $M $G ) > $R/gguf.txt 2>&1 ) &
  # The tests look for the paths they were built with.
  mkdir -p /work && ln -sfn $PWD /work/main; mkdir -p build && ln -sfn "$F" build/lib
  # …and the 4-bit reference model the concurrent-requests test reads (/work/main/../shared/models/).
  mkdir -p "$(dirname "$PWD")/shared/models" && ln -sfn "$PWD/.bundle_pack/tiny-code-qwen2-4bit" "$(dirname "$PWD")/shared/models/"
  timeout 300 "$F/opencl_vendor_paths_test" --gtest_filter="${VENDOR_FILTER:-*Batched*:*TensorCore*}" > $R/t_vendor.txt 2>&1; log "vendor rc=$?"
  mv_run() {  # rows cols batch options
    printf "rows %s cols %s batch %s opts '%s': " "$1" "$2" "$3" "$4" >> $R/matvec.txt
    timeout 60 "$F/bench_quant_matvec" --backend opencl --plugin-dir "$F" --backend-options "$4" --bits 4 \
      --rows "$1" --cols "$2" --prefill "$3" --reps 50 2>&1 | grep "^| 4-bit" | tr '\n' ' ' >> $R/matvec.txt
    echo >> $R/matvec.txt
  }
  B=tune.q4_batch_max_rows=64,tune.q4_batch_mma_min_rows=2; K=tune.q4_batch_mma_groups_per_cu=0
  if [ -n "${SWEEP_OPTS:-}" ]; then  # a sweep of one's own: option sets (one a line, $B and $K expanded), rows, shapes
    for n in ${SWEEP_ROWS:-2 4 8 16 32}; do
      for shape in ${SWEEP_SHAPES:-14336x4096 4096x14336 4096x4096 1024x4096}; do
        while IFS= read -r opts; do
          [ -n "$opts" ] && mv_run ${shape%x*} ${shape#*x} $n "$(eval echo "$opts")"
        done <<< "$SWEEP_OPTS"
      done
    done
  else
  for n in 2 4 8 16 32 64; do
    for opts in "$B,tune.q4_batch_mma=0" "$B" "$B,tune.q4_batch_mma_interleave=1" "$B,tune.q4_batch_mma_interleave=1,tune.q4_batch_mma_unroll=2" \
                "$B,tune.q4_batch_mma_unroll=2" \
                "$B,$K,tune.q4_batch_mma_m_warps=1" "$B,$K,tune.q4_batch_mma_m_warps=4" "$B,tune.q4_batch_mma_warps=16" \
                "$B,$K,tune.q4_batch_mma_warps=16,tune.q4_batch_mma_m_warps=8"; do
      mv_run 14336 4096 $n "$opts"
    done
    for shape in "4096 14336" "4096 4096" "1024 4096"; do
      for opts in "$B,tune.q4_batch_mma=0" "$B" "$B,tune.q4_batch_mma_interleave=1" "$B,tune.q4_batch_mma_unroll=2" "$B,tune.q4_batch_mma_warps=16"; do
        mv_run $shape $n "$opts"
      done
    done
  done
  fi
  mv_run 14336 4096 1 ""
  mv_run 4096 14336 1 ""
  log matvec
  wait; log "model and gguf"
  timeout 150 "$F/batching_test" --gtest_filter='*OpenCl*' > $R/t_batching.txt 2>&1; log "batching rc=$?"
  tail -n 2 $W/build.log $R/make_model.txt $R/gguf.txt | tee -a "$OUT/progress.txt"
  log start done ;;
measure)
  for i in $(seq 1 100); do grep -q BUILD_RC $W/build.log 2>/dev/null && break; sleep 3; done
  tail -n 1 $W/build.log | tee -a "$OUT/progress.txt"
  ours() {  # label options
    timeout 120 "$F/bench_batching" --model $M --backend opencl --plugin-dir "$F" --backend-options "$2" --gen 64 \
      --streams 1,2,4,8,16,32 > $R/ours_$1.txt 2>&1
    log "ours $1"
  }
  # RUNS: "label=options …" run before the peer and again after it (the default: three forms of the products)
  RUNS=${RUNS:-"mma= dp4a=tune.q4_batch_mma=0 ilv=tune.q4_batch_mma_interleave=1"}
  for run in $RUNS; do ours "${run%%=*}_1" "${run#*=}"; done
  timeout 200 $W/build/bin/llama-batched-bench -m $G -ngl 99 -fa on -c 16384 -b 2048 -ub 512 -npp 32 -ntg 64 \
    -npl 1,2,4,8,16,32 > $R/peer_batched.txt 2>&1
  log peer
  for run in $RUNS; do ours "${run%%=*}_2" "${run#*=}"; done
  for n in ${PROFILE_STREAMS:-8 32}; do  # profiled with the options of RUNS' first entry
    first=${RUNS%% *}
    SLUICE_OPENCL_PROFILE=1 SLUICE_OPENCL_HOST_TIMING=1 timeout 90 "$F/bench_batching" --model $M --backend opencl \
      --plugin-dir "$F" --backend-options "${first#*=}" --gen 32 --streams $n > $R/prof_$n.txt 2>&1
  done
  log "measure done" ;;
served)  # issue 30's served load, ours and llama-server, through perf/served_peer_gpu.sh's measure phase
  ln -sfn .bundle_mma .bundle_serve; ln -sfn $W /tmp/peer-serve
  OUT=$R/served bash perf/served_peer_gpu.sh measure ;;
*) echo "usage: $0 start|measure|served" >&2; exit 2 ;;
esac
