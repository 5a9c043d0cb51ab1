#!/bin/bash
# Issue 30's served load beside llama.cpp's server on the GPU machine: `sluice serve --parallel 16`
# and `llama-server -np 16` (same Llama-3-8B shape, 4-bit / Q4_0), each loaded by the same
# `sluice bench --server --clients 16 --requests 64 --gen 128` (greedy; prompts of 16 / 128 / 512
# words, every other one after a shared 1024-word prefix), one server at a time on a quiet machine.
# Two device calls back to back (the machine keeps /tmp while calls follow each other):
#   start    the peer's CUDA build of llama-server (detached; about 4 minutes), ours made
#            (`sluice make-model --preset llama3-8b --bits 4`) and the peer's GGUF of the same shape,
#            tokenizer and Q4_0 tensor types written from its config (perf/gguf_peer_model.py)
#   measure  a short warm-up load of ours (its kernels' programs compile on a fresh machine), then
#            ours, the peer, ours again; our counters after each load (/metrics)
# Here first (the bundle is ignored by git):
#   ../shared/device/bundle.sh .bundle_serve build/bin/sluice build/lib/sluice-backend-opencl.so && strip .bundle_serve/bin/*
#   mkdir -p .peer && cp ../shared/peer/llama-cpp-turboquant.tar.gz .peer/
# Device calls (carry [".bundle_serve", ".peer"]): bash perf/served_peer_gpu.sh start, then measure.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source .bundle_serve/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_serve/bin; M=/tmp/llama3-8b-4bit; R=/tmp/served; W=/tmp/peer-serve; G=/tmp/peer-l8-q4_0.gguf
mkdir -p $R
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
trap 'tar -czf "$OUT/served.tar.gz" -C $R . 2>/dev/null' EXIT
wait_health() { for i in $(seq 1 180); do curl -sf "http://127.0.0.1:$1/health" > /dev/null && return 0; sleep 1; done; return 1; }
load() {  # port, label
  timeout 240 "$F/sluice" bench --server "http://127.0.0.1:$1" --clients 16 --requests 64 --gen 128 --json-out $R/$2.json \
    > $R/$2.md 2> $R/$2.log
  { echo "## $2"; grep -E '^\|' $R/$2.md; } | tee -a "$OUT/served.md"
}
case "${1:-}" in
start)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
  if [ ! -f $W/build.log ]; then
    mkdir -p $W && tar xzf .peer/llama-cpp-turboquant.tar.gz -C $W
    setsid bash -c "cmake -S $W/lcpp -B $W/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_WEBUI=OFF -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release > $W/build.log 2>&1 && \
      cmake --build $W/build -j16 --target llama-server >> $W/build.log 2>&1; echo BUILD_RC=\$? >> $W/build.log" \
      > /dev/null 2>&1 < /dev/null &
  fi
  [ -f $M/config.json ] || ( time timeout 240 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $M --quiet ) > $R/make_model.txt 2>&1
  [ -f $G ] || ( time PYTHONPATH=$W/lcpp/gguf-py timeout 200 python3 perf/gguf_peer_model.py $M $G ) > $R/gguf.txt 2>&1
  for i in $(seq 1 120); do grep -q BUILD_RC $W/build.log 2>/dev/null && break; sleep 3; done
  tail -n 3 $W/build.log $R/make_model.txt $R/gguf.txt | tee -a "$OUT/progress.txt"
  log start done ;;
measure)
  ours() {  # label [warm-up]
    setsid "$F/sluice" serve --model $M --backend opencl --plugin-dir "$F" --port 8090 --parallel 16 --ctx-size 8192 \
      > $R/serve_$1.txt 2>&1 < /dev/null &
    local pid=$!
    if wait_health 8090; then
      [ -n "${2:-}" ] && timeout 120 "$F/sluice" bench --server http://127.0.0.1:8090 --clients 16 --requests 16 --gen 16 \
        > $R/warmup.txt 2>&1
      [ -z "${2:-}" ] && load 8090 "$1"
    else
      log "$1: server not ready"
    fi
    curl -s http://127.0.0.1:8090/metrics > $R/metrics_$1.txt
    kill $pid; wait $pid 2>/dev/null; log "$1"
  }
  ours warmup warmup
  ours ours_1
  # As llamacpp_gpu.sh serve, with 8192 positions a slot (-c is shared by the 16): the longest
  # request (a 2 608-token prefix, a 512-word part, 128 tokens) does not fit 4096.
  setsid $W/build/bin/llama-server -m $G -ngl 99 -fa on -np 16 -c 131072 --port 8091 \
    > $R/serve_peer.txt 2>&1 < /dev/null &
  wait_health 8091 && load 8091 peer || log "peer: server not ready"
  pkill -f llama-server; sleep 2; log peer
  ours ours_2
  log measure done ;;
*) echo "usage: $0 start|measure" >&2; exit 2 ;;
esac
