#!/bin/bash
# One device call (../shared/device/README.md): the dp4a 4-bit decode matvec (kernels_cl/matvec.cl,
# matvec_q4_dp4a) against the float kernel it replaces on NVIDIA — the vendor-path, op and conformance
# tests on the GPU first, then the llama3-8b shapes and the 4-bit preset's decode at depth 0 and 8192
# with the backend option tune.dp4a=0 and 1, and a kernel profile. Carried as .bundle/ (see kv_depth_gpu_run.sh).
# Results: perf/results/opencl_gpu.md, raw files in perf/results/dp4a_gpu/.
#   bash perf/dp4a_gpu_run.sh            (OUT defaults to /tmp/out)
set -u
source perf/device_run.sh
device_run_packed dp4a
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
for t in opencl_vendor_paths_test opencl_backend_ops_test opencl_conformance_test; do
  log "$t"
  timeout 150 $B/$t > "$OUT/$t.txt" 2>&1; echo "rc $?" >> "$OUT/$t.txt"
done
device_llama3_model
for dp4a in 1 0; do
  log "dp4a $dp4a shapes"
  for shape in 4096x4096 1024x4096 28672x4096 4096x14336 128256x4096; do
    echo "rows x cols $shape" >> "$OUT/matvec_dp4a$dp4a.txt"
    timeout 60 $B/bench_quant_matvec --backend opencl --backend-options tune.dp4a=$dp4a --plugin-dir $B --rows ${shape%x*} \
      --cols ${shape#*x} --bits 4 --prefill 0 --reps 50 >> "$OUT/matvec_dp4a$dp4a.txt" 2>&1
  done
  log "dp4a $dp4a depth"
  timeout 120 $B/bench_depth --model $MODEL --backend opencl --backend-options tune.dp4a=$dp4a --plugin-dir $B --kv-codec f16 \
    --depths 0,8192 --pp 512 --tg 64 --json > "$OUT/depth_dp4a$dp4a.txt" 2>&1
done
log "profile"
SLUICE_OPENCL_PROFILE=1 timeout 60 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
  --depths 0 --pp 16 --tg 16 > "$OUT/profile_depth0_f16.txt" 2>&1
log end
