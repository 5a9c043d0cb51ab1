#!/bin/bash
# One device call (../shared/device/README.md): the attention knobs at depth 32768 on the llama3-8b
# 4-bit preset — the OpenCL attention tests on the GPU first, then decode (tg32) for each setting of
# the attention's work-groups a compute unit (backend options tune.att_groups_per_cu and
# tune.att_groups_per_cu_fused) with f16 and turbo3, the other codecs at their defaults, and a
# kernel-time profile of each codec. Carried as .bundle/ (see kv_depth_gpu_run.sh).
#   bash perf/att_sweep_gpu_run.sh            (OUT defaults to /tmp/out; PER_CU="4 8 16" to change the sweep)
set -u
source perf/device_run.sh
device_run_packed att_sweep
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
for t in opencl_fused_attention_test kvcodec_opencl_source_test; do
  timeout 120 $B/$t > "$OUT/$t.txt" 2>&1; echo "rc $?" >> "$OUT/$t.txt"
done
device_llama3_model
depth() {  # name, codec, then backend options (tune.KEY=VALUE ...)
  local name=$1 codec=$2; shift 2
  log "$name"
  timeout 60 $B/bench_depth --model $MODEL --backend opencl --backend-options "$*" --plugin-dir $B --kv-codec $codec \
    --depths 32768 --pp 16 --tg 32 --json > "$OUT/$name.txt" 2>&1
}
for n in ${PER_CU:-4 8 16 32}; do
  depth "turbo3_percu$n" turbo3 tune.att_groups_per_cu=$n tune.att_groups_per_cu_fused=$n
  depth "f16_percu$n" f16 tune.att_groups_per_cu=$n tune.att_groups_per_cu_fused=$n
done
for rep in 1 2; do  # twice: the run-to-run spread
  for codec in f16 turbo3 k=turbo4,v=turbo3 turbo4; do depth "default_${codec//[=,]/_}_$rep" $codec; done
done
device_profile_depth32k f16 turbo3
log end
