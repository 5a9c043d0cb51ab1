#!/bin/bash
# Device calls for continuous batching (issue 9) and expert streaming (issue 7) on the GPU machine.
# Built here in build-device/ (-DSLUICE_NATIVE=OFF, x86-64-v3), carried as .bundle/ (see
# ../shared/device/README.md). Usage: perf/gpu_serving_moe_run.sh batching|moe ; results under $OUT.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source .bundle/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
B=.bundle/bin
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/progress.txt"; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; lscpu | grep "Model name"; df -h /tmp | tail -1; } > "$OUT/machine.txt" 2>&1
case "${1:-}" in
  batching)
    log make-model llama3-8b
    ( time timeout 240 sluice make-model --preset llama3-8b --bits 4 --out /tmp/llama3-8b-4bit ) > "$OUT/make_model.txt" 2>&1
    log bench_batching opencl
    timeout 300 $B/bench_batching --model /tmp/llama3-8b-4bit --backend opencl --plugin-dir $B --gen 32 --streams 1,2,4,8,16 --json \
      > "$OUT/batching_opencl.txt" 2>&1
    log end ;;
  moe)
    log make-model qwen3-30b-a3b
    ( time timeout 330 sluice make-model --preset qwen3-30b-a3b --bits 4 --out /tmp/q30 ) > "$OUT/make_model.txt" 2>&1
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
    log bench_moe_stream stacked
    timeout 200 $B/bench_moe_stream --model /tmp/q30 --backend cpu --threads 16 --plugin-dir $B --budgets 0,25,50 --tg 24 --cold-prompt 256 \
      --ceiling-seconds 4 > "$OUT/moe_stream.txt" 2>&1
    log repack
    ( time timeout 150 sluice repack-experts --model /tmp/q30 --out /tmp/q30r --quiet ) > "$OUT/repack.txt" 2>&1
    rm -rf /tmp/q30; sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
    log bench_moe_stream repacked
    timeout 150 $B/bench_moe_stream --model /tmp/q30r --backend cpu --threads 16 --plugin-dir $B --budgets 25,50 --tg 24 --cold-prompt 256 \
      --ceiling-seconds 4 > "$OUT/moe_stream_repacked.txt" 2>&1
    log end ;;
  *) echo "usage: $0 batching|moe" >&2; exit 2 ;;
esac
