#!/bin/bash
# Issue 30's served load beside llama.cpp's server on the GPU machine: `sluice serve --parallel 16`
# and `llama-server -np 16` (same Llama-3-8B shape, 4-bit / Q4_0), each loaded by the same
# `sluice bench --server --clients 16 --requests 64 --gen 128` (greedy; prompts of 16 / 128 / 512
# words, every other one after a shared 1024-word prefix), one server at a time on a quiet machine.
# Two device calls back to back (the machine keeps /tmp while calls follow each other):
#   start    the peer's build and model (.peer/llamacpp_gpu.sh prepare: CUDA build, transformers'
#            random Llama-3-8B → f16 GGUF → Q4_0; about 8 minutes) while ours is made
#            (`sluice make-model --preset llama3-8b --bits 4`)
#   measure  ours, the peer, ours again; each server's own counters after its load (our /metrics)
# Here first (the bundle is ignored by git):
#   ../shared/device/bundle.sh .bundle_serve build/bin/sluice build/lib/sluice-backend-opencl.so && strip .bundle_serve/bin/*
#   mkdir -p .peer && cp ../shared/peer/llama-cpp-turboquant.tar.gz ../shared/peer/llamacpp_gpu.sh .peer/
# Device calls (carry [".bundle_serve", ".peer"]): bash perf/served_peer_gpu.sh start, then measure.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
source .bundle_serve/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_serve/bin; M=/tmp/llama3-8b-4bit; R=/tmp/served
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
  ( time timeout 240 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $M --quiet ) > $R/make_model.txt 2>&1 &
  TOKDIR=models/tiny-code-qwen2 timeout 560 bash .peer/llamacpp_gpu.sh prepare > $R/peer_prepare.txt 2>&1
  wait
  tail -n 4 $R/peer_prepare.txt $R/make_model.txt | tee -a "$OUT/progress.txt"
  log start done ;;
measure)
  ours() {  # label
    setsid "$F/sluice" serve --model $M --backend opencl --plugin-dir "$F" --port 8090 --parallel 16 --ctx-size 8192 \
      > $R/serve_$1.txt 2>&1 < /dev/null &
    local pid=$!
    wait_health 8090 && load 8090 "$1" || log "$1: server not ready"
    curl -s http://127.0.0.1:8090/metrics > $R/metrics_$1.txt
    kill $pid; wait $pid 2>/dev/null; log "$1"
  }
  ours ours_1
  # As llamacpp_gpu.sh serve, with 8192 positions a slot (-c is shared by the 16): the longest
  # request (a 2 608-token prefix, a 512-word part, 128 tokens) does not fit 4096.
  setsid /tmp/peer/build/bin/llama-server -m /tmp/peer/l8-q4_0.gguf -ngl 99 -fa on -np 16 -c 131072 --port 8091 \
    > $R/serve_peer.txt 2>&1 < /dev/null &
  wait_health 8091 && load 8091 peer || log "peer: server not ready"
  pkill -f llama-server; sleep 2; log peer
  ours ours_2
  log measure done ;;
*) echo "usage: $0 start|measure" >&2; exit 2 ;;
esac
