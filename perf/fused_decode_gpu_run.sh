#!/bin/bash
# One device call (../shared/device/README.md): decode with fewer launches per layer — matmul_multi
# (q/k/v and gate/up in one launch each), add_rms_norm (the residual add with the next norm), the rope
# of q and k in one launch, and the dp4a matvec's 15-bit input written by the ops that produce it.
# The OpenCL tests on the GPU first, then the llama3-8b 4-bit preset's decode and prefill at depth 0
# and 8192 (f16 KV), a kernel profile with the device's idle time between launches, and (SWEEP=1) the
# dp4a matvec's rows per team and team size on the decode shapes, and decode with dp4a from 2^24
# weights (the o projection); with REPEAT=1 three more depth-0 decode rounds (tg128) and the host's
# time inside the backend (SLUICE_OPENCL_HOST_TIMING); with ATT=1 a profile at depth 8192 and the
# attention and gate/up knobs one at a time; with ROUNDS=1 three rounds at depths 0, 8192 and
# 32768, each timed REPS (5) times in its process (the figures for the record); with
# KNOBS="tune.att_wg=128 no-glu-join,tune.res_shape=64x2" decode and prefill at depth 0 and
# 8192 once per knob setting (commas join the parts of one setting: backend options and environment
# variables, device_run.sh's with_knobs),
# for A/B comparisons in one process lifetime each (KNOB_REPS=5: each timed five times, mean ± sd); with BUILDLOG=1 the NVIDIA compiler's register
# and spill counts of every kernel.
# Carried as .bundle/ (see kv_depth_gpu_run.sh). Results:
# perf/results/opencl_gpu.md, raw files in perf/results/fused_decode_gpu/.
#   bash perf/fused_decode_gpu_run.sh            (OUT defaults to /tmp/out)
set -u
source perf/device_run.sh
device_run_packed fused
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
for t in ${TESTS:-opencl_vendor_paths_test opencl_backend_ops_test opencl_conformance_test opencl_fused_attention_test}; do
  log "$t"
  # The fused-attention test builds an attention program per codec pair and head size with a cold
  # program cache (a fresh machine): minutes of NVIDIA compiler time.
  limit=150; [ $t = opencl_fused_attention_test ] && limit=420
  timeout $limit $B/$t > "$OUT/$t.txt" 2>&1; echo "rc $?" >> "$OUT/$t.txt"
done
device_llama3_model
log "depth"
timeout 150 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
  --depths 0,8192 --pp 512 --tg 64 --json > "$OUT/depth.txt" 2>&1
log "profile"
SLUICE_OPENCL_PROFILE=1 timeout 60 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
  --depths 0 --pp 16 --tg 16 > "$OUT/profile_depth0_f16.txt" 2>&1
if [ "${SWEEP:-0}" = 1 ]; then
  for rows in ${SWEEP_ROWS:-4 2 8}; do
    for team in 32 64 128; do
      log "sweep rows $rows team $team"
      for shape in 4096x4096 6144x4096 28672x4096 4096x14336; do
        echo "rows $rows team $team shape $shape" >> "$OUT/sweep.txt"
        timeout 60 $B/bench_quant_matvec --backend opencl \
          --backend-options "tune.q4_rows=$rows tune.q4_team=$team tune.dp4a_min_log2=20" --plugin-dir $B \
          --rows ${shape%x*} --cols ${shape#*x} --bits 4 --prefill 0 --reps 50 2>&1 | grep "4-bit" >> "$OUT/sweep.txt"
      done
    done
  done
  log "shapes"
  for shape in 4096x4096 6144x4096 28672x4096 4096x14336 128256x4096; do
    echo "default shape $shape" >> "$OUT/sweep.txt"
    timeout 60 $B/bench_quant_matvec --backend opencl --plugin-dir $B --rows ${shape%x*} --cols ${shape#*x} --bits 4 \
      --prefill 0 --reps 50 2>&1 | grep "4-bit" >> "$OUT/sweep.txt"
  done
  log "decode dp4a from 2^24"
  timeout 100 $B/bench_depth --model $MODEL --backend opencl --backend-options tune.dp4a_min_log2=24 --plugin-dir $B \
    --kv-codec f16 --depths 0 --pp 512 --tg 64 > "$OUT/depth_dp4a_min24.txt" 2>&1
fi
if [ "${ATT:-0}" = 1 ]; then
  log "attention profile at 8192"
  SLUICE_OPENCL_PROFILE=1 timeout 100 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
    --depths 8192 --pp 16 --tg 16 > "$OUT/profile_depth8192_f16.txt" 2>&1
  for knob in ${ATT_KNOBS:-tune.att_kpt=4 tune.att_kpt=2 tune.att_team=16 tune.att_vu=16 tune.att_wg=128 \
              no-glu-join}; do
    log "knob $knob"
    echo "$knob" >> "$OUT/att_knobs.txt"
    with_knobs "$knob" timeout 100 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
      --depths 0,8192 --pp 512 --tg 64 >> "$OUT/att_knobs.txt" 2>&1
  done
fi
if [ "${BUILDLOG:-0}" = 1 ]; then  # ptxas registers, spills and shared memory of every kernel the decode builds
  log "build log"
  SLUICE_OPENCL_BUILD_LOG=1 timeout 200 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
    --depths 0 --pp 16 --tg 4 > "$OUT/build_log.txt" 2>&1
fi
for knob in ${KNOBS:-}; do
  log "knob $knob"
  echo "$knob" >> "$OUT/knobs.txt"
  with_knobs "$knob" timeout 100 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
    --depths 0,8192 --pp 512 --tg 64 --reps ${KNOB_REPS:-1} >> "$OUT/knobs.txt" 2>&1
done
if [ "${ROUNDS:-0}" = 1 ]; then
  for i in 1 2 3; do
    log "final round $i"
    timeout 200 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
      --depths 0,8192,32768 --pp 512 --tg 64 --reps ${REPS:-5} --json > "$OUT/final_round$i.txt" 2>&1
  done
fi
if [ "${REPEAT:-0}" = 1 ]; then
  for i in 1 2 3; do
    log "decode round $i"
    timeout 100 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
      --depths 0 --pp 512 --tg 128 > "$OUT/depth0_round$i.txt" 2>&1
  done
  log "host timing"
  SLUICE_OPENCL_HOST_TIMING=1 timeout 100 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
    --depths 0 --pp 16 --tg 128 > "$OUT/host_timing.txt" 2>&1
fi
log end
