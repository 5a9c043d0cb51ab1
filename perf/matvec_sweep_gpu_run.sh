#!/bin/bash
# One device call (../shared/device/README.md): the 4-bit decode matvec on the llama3-8b shapes for
# each team size (backend option tune.q4_team: work-items sharing a group of 4 rows), and decode/prefill of the llama3-8b
# 4-bit preset at depth 0 with each; the matvec tests on the GPU first. Carried as .bundle/ (see
# kv_depth_gpu_run.sh). Results: perf/results/matvec_gpu_sweeps/.
#   bash perf/matvec_sweep_gpu_run.sh            (OUT defaults to /tmp/out; TEAMS="auto 32 64 128" to change the
#                                                 sweep; auto = the backend's choice per matrix; BANDWIDTH_ONLY=1
#                                                 stops after bench_cl_bandwidth)
set -u
source perf/device_run.sh
device_run_packed matvec_sweep
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
for t in opencl_conformance_test opencl_vendor_paths_test opencl_backend_ops_test; do
  timeout 120 $B/$t > "$OUT/$t.txt" 2>&1; echo "rc $?" >> "$OUT/$t.txt"
done
# What a plain kernel gets from the memory (read-only, and copy), the figure to set the matvec's against.
log bandwidth
for mb in 263 1024; do
  for per_cu in 1024 2048 8192; do
    timeout 60 $B/bench_cl_bandwidth --mb $mb --items-per-cu $per_cu --reps 20 >> "$OUT/bandwidth.txt" 2>&1
  done
done
[ "${BANDWIDTH_ONLY:-0}" = 1 ] && { log end; exit 0; }
device_llama3_model
for team in ${TEAMS:-auto 32 64 128}; do
  log "q4_team $team"
  knob=tune.q4_team=$team
  [ "$team" = auto ] && knob=
  for shape in 4096x4096 1024x4096 28672x4096 4096x14336 128256x4096; do
    echo "rows x cols $shape" >> "$OUT/matvec_team$team.txt"
    timeout 60 $B/bench_quant_matvec --backend opencl --backend-options "$knob" --plugin-dir $B --rows ${shape%x*} \
      --cols ${shape#*x} --bits 4 --prefill 0 --reps 50 >> "$OUT/matvec_team$team.txt" 2>&1
  done
  timeout 60 $B/bench_depth --model $MODEL --backend opencl --backend-options "$knob" --plugin-dir $B --kv-codec f16 \
    --depths 0 --pp 512 --tg 64 --json > "$OUT/depth0_team$team.txt" 2>&1
done
log "profile"
SLUICE_OPENCL_PROFILE=1 timeout 60 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec f16 \
  --depths 0 --pp 16 --tg 16 > "$OUT/profile_depth0_f16.txt" 2>&1
log end
