#!/bin/bash
# One device call (../shared/device/README.md): the attention knobs at depth 32768 on the llama3-8b
# 4-bit preset — the OpenCL attention tests on the GPU first, then decode (tg32) for each setting of
# SLUICE_OPENCL_ATT_GROUPS_PER_CU with f16 and turbo3, the other codecs at their defaults, and a
# kernel-time profile of each codec. Carried as .bundle/ (see kv_depth_gpu_run.sh).
#   bash perf/att_sweep_gpu_run.sh            (OUT defaults to /tmp/out; PER_CU="4 8 16" to change the sweep)
set -u
FINAL=${OUT:-/tmp/out}
OUT=/tmp/att_sweep_out
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL"
trap 'tar -czf "$FINAL/att_sweep.tar.gz" -C "$OUT" . ; cp "$OUT/progress.txt" "$FINAL/" 2>/dev/null' EXIT
source .bundle/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
B=.bundle/bin
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/progress.txt"; }
mkdir -p /work/main/build-device 2>/dev/null && ln -sfn "$PWD/$B" /work/main/build-device/lib 2>/dev/null
log start
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
for t in opencl_fused_attention_test kvcodec_opencl_source_test; do
  timeout 120 $B/$t > "$OUT/$t.txt" 2>&1; echo "rc $?" >> "$OUT/$t.txt"
done
log make-model
MODEL=/tmp/llama3-8b-4bit
[ -f $MODEL/config.json ] || ( time timeout 180 sluice make-model --preset llama3-8b --bits 4 --out $MODEL ) > "$OUT/make_model.txt" 2>&1
depth() {  # name, codec, then env assignments
  local name=$1 codec=$2; shift 2
  log "$name"
  env "$@" timeout 60 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec $codec --depths 32768 \
    --pp 16 --tg 32 --json > "$OUT/$name.txt" 2>&1
}
for n in ${PER_CU:-4 8 16 32}; do
  depth "turbo3_percu$n" turbo3 SLUICE_OPENCL_ATT_GROUPS_PER_CU=$n
  depth "f16_percu$n" f16 SLUICE_OPENCL_ATT_GROUPS_PER_CU=$n
done
for rep in 1 2; do  # twice: the run-to-run spread
  for codec in f16 turbo3 k=turbo4,v=turbo3 turbo4; do depth "default_${codec//[=,]/_}_$rep" $codec X=1; done
done
for codec in f16 turbo3; do
  log "profile $codec"
  SLUICE_OPENCL_PROFILE=1 timeout 60 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec $codec \
    --depths 32768 --pp 16 --tg 8 > "$OUT/profile_${codec}.txt" 2>&1
done
log end
