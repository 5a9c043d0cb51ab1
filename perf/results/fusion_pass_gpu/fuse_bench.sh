#!/bin/bash
# Call 2 (H100, warm, peer built by call 1): decode/prefill at depths 0/8192/32768, main (ABI 2 with the
# deferred records) and the fusion pass alternately, and the llama.cpp peer in the same sitting.
set -u
source .bundle/activate.sh; export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle/bin; M=$PWD/.bundle/main/bin
log() { echo "[$(date +%T)] $*" | tee -a "$OUT/progress.txt"; }
start=$(date +%s); left() { echo $(( 585 - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/bench.txt" 2>&1
MODEL=/tmp/llama3-8b-4bit
[ -d $MODEL ] || timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $MODEL > /dev/null 2>&1
for b in fuse main peer fuse main; do
  [ "$(left)" -lt 100 ] && { log "stop before $b: $(left) s left"; break; }
  if [ $b = peer ]; then
    [ -x /tmp/peer/build/bin/llama-bench ] || { log "no peer build"; continue; }
    echo "== peer" >> "$OUT/bench.txt"
    timeout $(( $(left) - 90 )) /tmp/peer/build/bin/llama-bench -m /tmp/peer/l8-q4_0.gguf -ngl 99 -fa 1 -p 512 -n 128 -d 0,8192,32768 -r 3 -o md >> "$OUT/bench.txt" 2>&1
  else
    d=$F; [ $b = main ] && d=$M
    echo "== bench $b" >> "$OUT/bench.txt"
    timeout $(( $(left) - 20 )) "$d/bench_depth" --model $MODEL --backend opencl --plugin-dir "$d" --depths 0,8192,32768 --pp 512 --tg 128 --reps 3 >> "$OUT/bench.txt" 2>&1
  fi
  log "bench $b"
done
