#!/bin/bash
# One device call (../shared/device/README.md): the tensor-core prefill GEMM (kernels_cl/gemm_mma.cl)
# against the CLBlast path it replaces (backend option tune.mma=0). The OpenCL tests on the GPU first (the
# vendor-path test for each GEMM shape), then bench_quant_matvec's prefill product (512 rows) on the
# llama3-8b shapes and bench_depth pp512 at depths 0 and 8192 for each shape and without the GEMM, and
# kernel-time profiles of one pp512. Carried as a packed bundle (.devcarry/bundle.tar.xz of .bundle/,
# see perf/kv_depth_gpu_run.sh). Results: perf/results/opencl_gpu.md.
#   bash perf/prefill_mma_gpu_run.sh            (OUT defaults to /tmp/out)
set -u
source perf/device_run.sh
device_run_packed prefill_mma
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
# Variants: name and the backend options that select it (none: the defaults); the tests get them
# through SLUICE_TEST_BACKEND_OPTIONS.
variants=("default" "bk64_bm128 tune.mma_bm=128" "bk64_bm64 tune.mma_bm=64" "bk32_bm128 tune.mma_bk=32" "off tune.mma=0")
log tests
for t in opencl_backend_ops_test opencl_conformance_test; do
  timeout 150 $B/$t > "$OUT/$t.txt" 2>&1; echo "rc $?" >> "$OUT/$t.txt"
done
for v in "${variants[@]:0:4}"; do
  set -- $v
  SLUICE_TEST_BACKEND_OPTIONS="${2:-}" timeout 150 $B/opencl_vendor_paths_test > "$OUT/opencl_vendor_paths_test_$1.txt" 2>&1
  echo "rc $?" >> "$OUT/opencl_vendor_paths_test_$1.txt"
done
log gemm
for v in "${variants[@]}"; do
  set -- $v
  for shape in 4096x4096 1024x4096 14336x4096 4096x14336; do
    echo "rows x cols $shape" >> "$OUT/gemm_$1.txt"
    timeout 60 $B/bench_quant_matvec --backend opencl --backend-options "${2:-}" --plugin-dir $B --rows ${shape%x*} \
      --cols ${shape#*x} --bits 4 --prefill 512 --reps 10 >> "$OUT/gemm_$1.txt" 2>&1
  done
done
device_llama3_model
for v in "${variants[@]}"; do
  set -- $v
  log "depth $1"
  timeout 120 $B/bench_depth --model $MODEL --backend opencl --backend-options "${2:-}" --plugin-dir $B --kv-codec f16 \
    --depths 0,8192 --pp 512 --tg 16 --json > "$OUT/depth_$1.txt" 2>&1
done
for v in "${variants[@]:1:2}"; do
  set -- $v
  log "profile $1"
  SLUICE_OPENCL_PROFILE=1 timeout 60 $B/bench_depth --model $MODEL --backend opencl --backend-options "${2:-}" --plugin-dir $B \
    --kv-codec f16 --depths 0 --pp 512 --tg 4 > "$OUT/profile_pp512_$1.txt" 2>&1
done
log end
