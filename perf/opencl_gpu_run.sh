#!/bin/bash
# One device call (../shared/device/README.md): checks and measurements of the OpenCL backend on the
# GPU machine, results under $OUT. Built here in build-device/ (-DSLUICE_NATIVE=OFF, x86-64-v3) and
# carried as .bundle/ (../shared/device/bundle.sh). Results go to perf/results/opencl_gpu.md.
set -u
source perf/device_run.sh
device_run_env
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } > "$OUT/machine.txt" 2>&1
sluice devices --plugin-dir $B > "$OUT/devices.txt" 2>&1
log conformance
timeout 90 sluice conformance --backend opencl --plugin-dir $B > "$OUT/conformance_ptx.txt" 2>&1; echo "rc $?" >> "$OUT/conformance_ptx.txt"
SLUICE_OPENCL_PORTABLE=1 timeout 90 sluice conformance --backend opencl --plugin-dir $B > "$OUT/conformance_portable.txt" 2>&1; echo "rc $?" >> "$OUT/conformance_portable.txt"
log tests
for t in opencl_vendor_paths_test opencl_backend_ops_test; do timeout 60 $B/$t > "$OUT/$t.txt" 2>&1; echo "rc $?" >> "$OUT/$t.txt"; done
log make-model
( time timeout 180 sluice make-model --preset llama3-8b --bits 4 --out /tmp/llama3-8b-4bit ) > "$OUT/make_model.txt" 2>&1
du -sh /tmp/llama3-8b-4bit >> "$OUT/make_model.txt" 2>&1
MODEL=/tmp/llama3-8b-4bit
[ -f $MODEL/config.json ] || MODEL=models/tiny-code-qwen2
echo "model $MODEL" >> "$OUT/make_model.txt"
log bench d0,8192
timeout 150 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 --depths 0,8192 --pp 512 --tg 64 --json > "$OUT/bench_d0_8192.txt" 2>&1
log bench d32768
timeout 120 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 --depths 32768 --pp 512 --tg 32 --json > "$OUT/bench_d32768.txt" 2>&1
log end
