#!/bin/bash
# One device call (../shared/device/README.md): the tensor-core prefill GEMM (kernels_cl/gemm_mma.cl)
# against the CLBlast path it replaces (SLUICE_OPENCL_MMA=0). The OpenCL tests on the GPU first, then
# bench_quant_matvec's prefill product (512 rows) on the llama3-8b shapes, bench_depth pp512 at depths 0
# and 8192 with and without the knob, and a kernel-time profile of one pp512. Carried as a packed
# bundle (.devcarry/bundle.tar.xz of .bundle/, see perf/kv_depth_gpu_run.sh). Results:
# perf/results/opencl_gpu.md.
#   bash perf/prefill_mma_gpu_run.sh            (OUT defaults to /tmp/out)
set -u
source perf/device_run.sh
device_run_packed prefill_mma
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; git log -1 --format=%H 2>/dev/null; } > "$OUT/machine.txt" 2>&1
for t in opencl_vendor_paths_test opencl_backend_ops_test opencl_conformance_test; do
  log "$t"
  timeout 150 $B/$t > "$OUT/$t.txt" 2>&1; echo "rc $?" >> "$OUT/$t.txt"
done
log gemm
for mma in 1 0; do
  for shape in 4096x4096 1024x4096 14336x4096 4096x14336; do
    echo "rows x cols $shape" >> "$OUT/gemm_mma$mma.txt"
    SLUICE_OPENCL_MMA=$mma timeout 60 $B/bench_quant_matvec --backend opencl --plugin-dir $B --rows ${shape%x*} \
      --cols ${shape#*x} --bits 4 --prefill 512 --reps 10 >> "$OUT/gemm_mma$mma.txt" 2>&1
  done
done
device_llama3_model
for mma in 1 0; do
  log "depth mma $mma"
  SLUICE_OPENCL_MMA=$mma timeout 120 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
    --depths 0,8192 --pp 512 --tg 16 --json > "$OUT/depth_mma$mma.txt" 2>&1
done
log profile
SLUICE_OPENCL_PROFILE=1 timeout 60 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
  --depths 0 --pp 512 --tg 4 > "$OUT/profile_pp512.txt" 2>&1
log end
