#!/bin/bash
# One device call (../shared/device/README.md): prefill attention on tensor cores
# (kernels_cl/attention_mma.cl) against the portable kernels it replaces for prefill runs
# (backend option tune.mma_att=0). The OpenCL tests on the GPU first (the mma attention test against a
# float64 reference, also with 3 key splits forced; vendor paths, fused attention, op suite,
# conformance, golden models), then bench_depth pp512 / tg16 of the llama3-8b 4-bit preset at depths
# 0 and 8192 — f16 (with, without, and with 1 or 16 key splits forced), and turbo3 with --kv-recent 0
# (with its automatic recent window the portable kernels serve) — f16 at 32768, and kernel-time
# profiles of one pp512. Carried as .devcarry/bundle.tar.xz (perf/kv_depth_gpu_run.sh).
# Results: perf/results/opencl_gpu.md.
#   bash perf/prefill_attention_mma_gpu_run.sh            (OUT defaults to /tmp/out)
set -u
source perf/device_run.sh
device_run_packed prefill_attention_mma
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
log tests
for t in opencl_mma_attention_test opencl_vendor_paths_test opencl_fused_attention_test opencl_backend_ops_test \
         opencl_conformance_test opencl_golden_models_test; do
  timeout 150 $B/$t > "$OUT/$t.txt" 2>&1; echo "rc $?" >> "$OUT/$t.txt"
done
# The key splits and their merge in every case (the automatic count splits only some of them).
SLUICE_TEST_BACKEND_OPTIONS=tune.mma_att_splits=3 timeout 150 $B/opencl_mma_attention_test \
  > "$OUT/opencl_mma_attention_test_splits3.txt" 2>&1
echo "rc $?" >> "$OUT/opencl_mma_attention_test_splits3.txt"
device_llama3_model
# Variants: name and the backend options that select it (none: the defaults).
variants=("on" "off tune.mma_att=0" "splits1 tune.mma_att_splits=1" "splits16 tune.mma_att_splits=16")
for v in "${variants[@]}"; do
  set -- $v
  log "depth $1"
  timeout 120 $B/bench_depth --model $MODEL --backend opencl --backend-options "${2:-}" --plugin-dir $B --kv-codec f16 \
    --depths 0,8192 --pp 512 --tg 16 --json > "$OUT/depth_f16_$1.txt" 2>&1
done
for v in "${variants[@]:0:2}"; do
  set -- $v
  log "depth turbo3 $1"
  timeout 120 $B/bench_depth --model $MODEL --backend opencl --backend-options "${2:-}" --plugin-dir $B --kv-codec turbo3 --kv-recent 0 \
    --depths 0,8192 --pp 512 --tg 16 --json > "$OUT/depth_turbo3_$1.txt" 2>&1
done
log "depth 32768"
timeout 120 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
  --depths 32768 --pp 512 --tg 16 --json > "$OUT/depth_f16_32768_on.txt" 2>&1
for d in 0 8192; do
  log "profile depth $d"
  SLUICE_OPENCL_PROFILE=1 timeout 90 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B \
    --kv-codec f16 --depths $d --pp 512 --tg 4 > "$OUT/profile_pp512_d${d}_on.txt" 2>&1
done
log "profile turbo3 depth 8192"
SLUICE_OPENCL_PROFILE=1 timeout 90 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B \
  --kv-codec turbo3 --kv-recent 0 --depths 8192 --pp 512 --tg 4 > "$OUT/profile_pp512_d8192_turbo3_on.txt" 2>&1
log end
