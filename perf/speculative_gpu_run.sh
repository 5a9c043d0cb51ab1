#!/bin/bash
# Speculative decoding on the GPU machine (issue 27), one device call: bench_speculative on a target
# model with n-gram drafting and a draft model, plain decoding timed in the same process.
#
# Here, first (the bundle is ignored by git):
#   ../shared/device/bundle.sh .bundle_spec build/bin/sluice build/bin/bench_speculative build/lib/sluice-backend-opencl.so
#   cp ../shared/golden/eval_code_ids.json .bundle_spec/
# Device call (kind nvidia-h100-x1, carry [".bundle_spec"]): bash perf/speculative_gpu_run.sh
# MODEL: the target (default: the llama3-8b preset at 4 bits, made here if missing); DRAFT: the draft
# model (default: the same preset and seed at 2 bits — the same vocabulary and nearly the same
# choices, reading half the bytes: a check of the machinery, not of a trained pair). Each
# configuration's engine is loaded alone (--sequential): an 8B model is not held twice.
#
# Predictions (perf/NOTES.md, "Speculative decoding"): decode of one stream reads the weights once per
# pass, and the batched 4-bit product reads them once for up to 8 rows, so a pass of 1 + k tokens
# (k ≤ 7) costs about one token's pass; tokens/s should then scale with tokens per pass for n-gram
# drafting, and by tokens per pass over (1 + k × the draft's cost relative to the target's) for a
# draft model.
set -u
source .bundle_spec/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_spec/bin
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
MODEL=${MODEL:-/tmp/llama3-8b-4bit}
DRAFT=${DRAFT:-/tmp/llama3-8b-2bit}
[ -d "$MODEL" ] || timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out "$MODEL" > /dev/null 2>&1
[ -d "$DRAFT" ] || timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 2 --out "$DRAFT" > /dev/null 2>&1
log models
timeout 400 "$F/bench_speculative" --model "$MODEL" --draft-model "$DRAFT" --backend opencl --plugin-dir "$F" \
  --prompt-ids .bundle_spec/eval_code_ids.json --prompt-tokenizer models/tiny-code-qwen2 \
  --draft-tokens 3,7,15 --prompts 4 --prompt-len 256 --gen 128 --rounds 2 --sequential --json > "$OUT/speculative.txt" 2>&1
log bench
