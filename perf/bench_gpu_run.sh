#!/bin/bash
# `sluice bench` matrices on the GPU machine (one device call; see ../shared/device/README.md), results
# under $OUT: JSON per matrix, the markdown tables, PNG charts (when matplotlib is there; else make them
# here with perf/plot.py), the machine, and progress with timestamps. Copy them to perf/results/bench/.
#
# Here, first (the bundle is ignored by git):
#   cmake -S . -B build-device -DSLUICE_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3   # re-run: records the commit
#   cmake --build build-device -j2 --target sluice sluice-backend-opencl sluice-expertstore-uring \
#     sluice-kvcodec-turbo3 sluice-kvcodec-turbo4
#   ../shared/device/bundle.sh .bundle build-device/bin/sluice build-device/lib/*.so
# Device call (kind nvidia-h100-x1, carry [".bundle"]):  bash perf/bench_gpu_run.sh  (results: $OUT/bench_gpu.tar.gz)
#
# Budget: under 8 minutes on an H100 host with 16 cores. Stages run in order of importance, each under
# `timeout` for what is left of the budget; every row has --row-timeout, so a slow row is recorded as
# failed and the matrix goes on. Estimated: llama3-8b make-model 95 s, its OpenCL matrix 170 s,
# qwen3-30b-a3b make-model 75 s, its matrix 60 s, the llama3-8b CPU matrix 100 s (cut short if the
# budget ends first), then the OpenCL 32768 row only if 100 s are left.
set -u
FINAL=${OUT:-/tmp/out}
OUT=/tmp/bench_gpu_out  # everything here, packed into $FINAL/bench_gpu.tar.gz at the end (the device
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL"  # tool returns a handful of files, not dozens)
trap 'tar -czf "$FINAL/bench_gpu.tar.gz" -C "$OUT" . ; cp "$OUT/progress.txt" "$FINAL/" 2>/dev/null' EXIT
source .bundle/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
B=.bundle/bin
BUDGET=${BUDGET:-465}  # seconds of this script's run time
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
# Seconds left for a stage: at most $1, at least 1.
left() { local l=$((BUDGET - SECONDS)); ((l > $1)) && l=$1; ((l < 1)) && l=1; echo $l; }
# bench NAME ARGS...: one matrix, JSON + markdown table + stderr progress under $OUT.
bench() {
  local name=$1; shift
  log "bench $name"
  timeout "$(left 300)" sluice bench --plugin-dir $B --json-out "$OUT/$name.json" "$@" > "$OUT/$name.md" 2> "$OUT/$name.log"
  echo "rc $?" >> "$OUT/$name.log"
  tail -1 "$OUT/$name.log" | tee -a "$OUT/progress.txt"
}
log start
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; lscpu | grep "Model name"; free -g | head -2;
  df -h /tmp | tail -1; cat /proc/loadavg; } > "$OUT/machine.txt" 2>&1
sluice devices --plugin-dir $B > "$OUT/devices.txt" 2>&1

log make-model llama3-8b
( time timeout "$(left 170)" sluice make-model --preset llama3-8b --bits 4 --out /tmp/llama3-8b-4bit ) > "$OUT/make_model_llama.txt" 2>&1
L=/tmp/llama3-8b-4bit
if [ -f $L/config.json ]; then
  # The headline: decode and prefill on the GPU at depth, three KV codecs.
  bench llama3-8b_opencl --model $L --backends opencl --kv-codecs f16,turbo3,turbo4 --ctx 0,512,8192 --gen 32 --reps 2 --row-timeout 60
fi

log make-model qwen3-30b-a3b
( time timeout "$(left 170)" sluice make-model --preset qwen3-30b-a3b --bits 4 --out /tmp/q30 ) > "$OUT/make_model_qwen.txt" 2>&1
if [ -f /tmp/q30/config.json ]; then
  # Experts resident (the mapped files, in the page cache after make-model) and streamed through
  # io_uring with O_DIRECT (the page cache does not help it) under a budget of a quarter of them.
  bench qwen3-30b-a3b_cpu --model /tmp/q30 --backends cpu --threads 16 --expert-stores "resident,uring@25%" --ctx 0,256 --gen 32 \
    --reps 2 --row-timeout 60
fi

# Layer splits: the first N of 32 layers on the GPU, the rest on the host's cores.
if [ -f $L/config.json ]; then
  bench llama3-8b_split --model $L --backends opencl --gpu-layers all,24,16 --kv-codecs f16 --ctx 512 --gen 32 --reps 1 \
    --row-timeout 60
fi

# The dense model on the host's 16 cores (8192 would take minutes a row on the CPU: 0 and 512 only).
# Last of the required stages: the rows finished before the budget ends are kept (the file is
# rewritten after every row).
if [ -f $L/config.json ]; then
  bench llama3-8b_cpu --model $L --backends cpu --threads 16 --kv-codecs f16,turbo3,turbo4 --ctx 0,512 --gen 32 --reps 2 --row-timeout 45
fi

# Long context on the GPU, if the budget still allows one row of it.
if [ -f $L/config.json ] && ((BUDGET - SECONDS > 100)); then
  bench llama3-8b_opencl_32k --model $L --backends opencl --kv-codecs f16 --ctx 32768 --gen 16 --reps 1 --row-timeout $((BUDGET - SECONDS - 5))
fi

log plot
if python3 -c "import matplotlib" 2>/dev/null; then
  for f in "$OUT"/*.json; do python3 perf/plot.py "$f" --out "$OUT" >> "$OUT/progress.txt" 2>&1; done
else
  log "no matplotlib here: run perf/plot.py on the JSON files on the development machine"
fi
cat /proc/loadavg >> "$OUT/machine.txt"
log end
