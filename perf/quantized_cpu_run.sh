#!/bin/bash
# Issue 4's CPU table in one command: prefill (pp512) and decode (tg128) tokens/s of the tiny model
# (bf16, 8-bit, 4-bit) and the qwen2-0.5b preset (8-bit, 4-bit) on the CPU backend, each model run
# ROUNDS times in turn (one model after another, so a burst of load from elsewhere lands on different
# models in different rounds), every run `bench_model --reps 3` (median of 3 after a warm-up) with the
# machine's read/copy bandwidth measured in the same run. Prints each run's row and the load average
# before it; the table in perf/results/quantized_cpu.md takes the median of the rounds.
#   bash perf/quantized_cpu_run.sh [BUILD=build] [ROUNDS=3] [THREADS=2]
set -eu
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
SHARED=${SHARED:-../shared/models}
MODELS=${MODELS_DIR:-/tmp/sluice-models}
mkdir -p "$MODELS"
for bits in 8 4; do
  [ -f "$MODELS/qwen2-0.5b-${bits}bit/config.json" ] ||
    "$BUILD/bin/sluice" make-model --preset qwen2-0.5b --bits $bits --seed 1 --out "$MODELS/qwen2-0.5b-${bits}bit"
done
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (+ uncommitted changes)'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) CPUs"
for round in $(seq "$ROUNDS"); do
  for m in "$SHARED/tiny-code-qwen2" "$SHARED/tiny-code-qwen2-8bit" "$SHARED/tiny-code-qwen2-4bit" \
           "$MODELS/qwen2-0.5b-8bit" "$MODELS/qwen2-0.5b-4bit"; do
    echo "round $round, load $(cut -d' ' -f1 /proc/loadavg)"
    "$BUILD/bin/bench_model" --model "$m" --threads "$THREADS" --reps 3 --pp 512 --tg 128 --plugin-dir "$BUILD/lib" 2>&1 |
      grep -E '^\| |decode reads'
  done
done
