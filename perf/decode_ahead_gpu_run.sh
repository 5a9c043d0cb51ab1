#!/bin/bash
# One device call (../shared/device/README.md): greedy decoding a token ahead (core/engine/greedy_ahead.h)
# on the llama3-8b 4-bit preset, f16 KV. First the same ids with and without it (`sluice generate`),
# then decode and prefill at depths 0 and 8192 with --decode-ahead on and off interleaved, each
# process timing five runs (--reps 5; ROUNDS pairs, default 2), and a kernel profile of the ahead
# path (the argmax's two launches). Results: perf/results/opencl_gpu.md; raw files in
# perf/results/fused_decode_gpu/.
#   OUT=$OUT bash perf/decode_ahead_gpu_run.sh     (carry the bundle as in fused_decode_gpu_run.sh)
set -u
source perf/device_run.sh
device_run_packed ahead
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
device_llama3_model
for m in on off; do
  log "generate $m"
  timeout 120 $B/sluice generate --model $MODEL --backend opencl --plugin-dir $B --prompt-ids 1,2,3,4,5 --max-tokens 64 \
    --ignore-eos --decode-ahead $m --json > "$OUT/generate_$m.txt" 2>&1
done
for round in $(seq 1 ${ROUNDS:-2}); do
  for m in on off; do
    log "round $round decode-ahead $m"
    echo "decode-ahead $m" >> "$OUT/depth.txt"
    timeout 150 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 --depths 0,8192 \
      --pp 512 --tg 64 --reps 5 --decode-ahead $m --json >> "$OUT/depth.txt" 2>&1
  done
done
log "profile"
SLUICE_OPENCL_PROFILE=1 timeout 60 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
  --depths 0 --pp 16 --tg 16 > "$OUT/profile_depth0_f16.txt" 2>&1
log end
