#!/bin/bash
# One device call (../shared/device/README.md): the KV codecs on the GPU machine's OpenCL backend —
# the fused-attention and recent-window tests on the H100, then decode and prefill tokens/s of the
# llama3-8b 4-bit preset at depth 0, 8192 and 32768 with f16 and the turbo codecs, and a kernel-time
# profile at depth 32768. Built here in build-device/ (-DSLUICE_NATIVE=OFF, x86-64-v3), carried as
# .bundle/ (../shared/device/bundle.sh). Results: perf/results/kv_codecs_gpu.md.
#   bash perf/kv_depth_gpu_run.sh            (OUT defaults to /tmp/out)
set -u
source perf/device_run.sh
device_run_packed kv_depth  # everything under /tmp/kv_depth_out, packed into $OUT/kv_depth.tar.gz
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; git log -1 --format=%H 2>/dev/null; } > "$OUT/machine.txt" 2>&1

log tests
timeout 120 $B/opencl_fused_attention_test > "$OUT/opencl_fused_attention_test.txt" 2>&1; echo "rc $?" >> "$OUT/opencl_fused_attention_test.txt"
timeout 120 $B/opencl_backend_ops_test > "$OUT/opencl_backend_ops_test.txt" 2>&1; echo "rc $?" >> "$OUT/opencl_backend_ops_test.txt"
timeout 60 $B/kvcodec_opencl_source_test > "$OUT/kvcodec_opencl_source_test.txt" 2>&1; echo "rc $?" >> "$OUT/kvcodec_opencl_source_test.txt"
timeout 60 $B/opencl_vendor_paths_test > "$OUT/opencl_vendor_paths_test.txt" 2>&1; echo "rc $?" >> "$OUT/opencl_vendor_paths_test.txt"
timeout 120 $B/opencl_conformance_test > "$OUT/opencl_conformance_test.txt" 2>&1; echo "rc $?" >> "$OUT/opencl_conformance_test.txt"

device_llama3_model

# Decode (tg32) and prefill (pp512) at each depth; the cache is filled with random K/V (bench_depth
# --fill random): decode speed depends on how much KV there is, not on its values.
for codec in f16 turbo3 k=turbo4,v=turbo3 turbo4; do
  log "depth $codec"
  timeout 120 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec $codec --depths 0,8192,32768 \
    --pp 512 --tg 32 --json > "$OUT/depth_${codec//[=,]/_}.txt" 2>&1
done
# Knobs measured at depth 32768 (perf/results/kv_codecs_gpu.md): the backend options tune.att_vu (value
# rows in flight per work-item), tune.att_groups_per_cu / tune.att_groups_per_cu_fused (attention
# splits), tune.att_wg.
# Here: the defaults again, for the run-to-run spread.
for codec in f16 turbo3 k=turbo4,v=turbo3; do
  log "depth $codec again"
  timeout 60 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec $codec --depths 32768 \
    --pp 16 --tg 32 --json > "$OUT/again_${codec//[=,]/_}.txt" 2>&1
done
log "depth turbo3 without the window"
timeout 60 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec turbo3 --kv-recent 0 --depths 32768 \
  --pp 512 --tg 32 --json > "$OUT/depth_turbo3_w0.txt" 2>&1

# Where the time goes at depth 0 and 32768: kernel time per kernel over the decode tokens.
for codec in f16 turbo3; do
  log "profile depth 0 $codec"
  SLUICE_OPENCL_PROFILE=1 timeout 60 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec $codec \
    --depths 0 --pp 16 --tg 16 > "$OUT/profile_depth0_$codec.txt" 2>&1
done
# The 4-bit decode matvec alone on the model's shapes (q/o, k/v, gate+up, down, LM head): bytes per second.
log "matvec shapes"
for shape in 4096x4096 1024x4096 28672x4096 4096x14336 128256x4096; do
  echo "rows x cols $shape" >> "$OUT/matvec_shapes.txt"
  timeout 60 $B/bench_quant_matvec --backend opencl --plugin-dir $B --rows ${shape%x*} --cols ${shape#*x} --bits 4 \
    --prefill 0 --reps 50 >> "$OUT/matvec_shapes.txt" 2>&1
done
device_profile_depth32k f16 turbo3
# Layer partitioning (issue 5) on the same model: decode with the first N layers on the GPU.
[ "${SKIP_SPLIT:-0}" = 1 ] && { log end; exit 0; }
log "gpu-layers"
timeout 60 $B/layer_split_test > "$OUT/layer_split_test.txt" 2>&1; echo "rc $?" >> "$OUT/layer_split_test.txt"
for n in 32 24 16 0; do
  echo "gpu-layers $n" >> "$OUT/gpu_layers.txt"
  timeout 60 sluice generate --model $MODEL --backend opencl --plugin-dir $B --gpu-layers $n --ctx-size 4096 \
    --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 32 --ignore-eos --json 2>&1 | tail -2 >> "$OUT/gpu_layers.txt"
done
echo "devices opencl:0:0,opencl:0:0" >> "$OUT/gpu_layers.txt"
timeout 60 sluice generate --model $MODEL --devices opencl:0:0,opencl:0:0 --plugin-dir $B --ctx-size 4096 \
  --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 32 --ignore-eos --json 2>&1 | tail -2 >> "$OUT/gpu_layers.txt"
echo "gpu-layers auto" >> "$OUT/gpu_layers.txt"
timeout 60 sluice generate --model $MODEL --backend opencl --plugin-dir $B --gpu-layers auto --ctx-size 32768 \
  --prompt-ids 1,2,3 --max-tokens 16 --ignore-eos --json 2>&1 | tail -2 >> "$OUT/gpu_layers.txt"
log end
