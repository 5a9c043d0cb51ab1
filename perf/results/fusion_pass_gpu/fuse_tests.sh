#!/bin/bash
# Call 1 (H100): the peer's build started in the background; the fusion-pass build's OpenCL tests on the
# GPU and its greedy text against main's.
set -u
source .bundle/activate.sh; export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle/bin; M=$PWD/.bundle/main/bin
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/progress.txt"; }
(setsid bash .peer/llamacpp_gpu.sh prepare > /tmp/peer_prepare.txt 2>&1 < /dev/null &)
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; } > "$OUT/summary.txt" 2>&1
MODEL=/tmp/llama3-8b-4bit
timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $MODEL > /dev/null 2>&1; log model
for b in main fuse; do
  d=$F; [ $b = main ] && d=$M
  timeout 90 "$d/sluice" generate --model $MODEL --backend opencl --plugin-dir "$d" --prompt-ids 1,2,3,4,5,6,7,8 --max-tokens 48 --ignore-eos > "$OUT/generate_$b.txt" 2>&1
done
cmp -s <(grep -v tok/s "$OUT/generate_main.txt") <(grep -v tok/s "$OUT/generate_fuse.txt") && echo "greedy text main/fuse: same" >> "$OUT/summary.txt" || echo "greedy text main/fuse: DIFFERENT" >> "$OUT/summary.txt"
grep -h "tok/s" "$OUT"/generate_*.txt >> "$OUT/summary.txt"
log generate
SLUICE_OPENCL_HOST_TIMING=1 timeout 60 "$F/bench_depth" --model $MODEL --backend opencl --plugin-dir "$F" --depths 0 --pp 16 --tg 128 --reps 1 > "$OUT/host_timing.txt" 2>&1
SLUICE_OPENCL_PROFILE=1 timeout 60 "$F/bench_depth" --model $MODEL --backend opencl --plugin-dir "$F" --depths 0 --pp 16 --tg 32 --reps 1 > "$OUT/profile.txt" 2>&1
log timing
mkdir -p /work/fuse/build && ln -sfn "$F" /work/fuse/build/lib
for t in opencl_vendor_paths_test opencl_backend_ops_test opencl_mma_attention_test opencl_fused_attention_test; do
  s=$(date +%s); timeout 170 "$F/$t" > "$OUT/t_$t.txt" 2>&1; echo "== $t rc=$? in $(( $(date +%s) - s )) s" >> "$OUT/summary.txt"; grep -E '^\[  (PASSED|FAILED|SKIPPED) |Failure' "$OUT/t_$t.txt" | head -12 >> "$OUT/summary.txt"
  grep -q FAILED "$OUT/t_$t.txt" || rm -f "$OUT/t_$t.txt"
done
log tests
for i in $(seq 1 60); do grep -q "gguf" /tmp/peer_prepare.txt 2>/dev/null && ls /tmp/peer/l8-q4_0.gguf > /dev/null 2>&1 && break; sleep 5; done
tail -5 /tmp/peer_prepare.txt >> "$OUT/summary.txt"; log peer
