#!/bin/bash
# Gemma-4-26b-a4b over the turbo3 cache on NVIDIA: where a decode step's time goes (issue 24; 8.3
# tokens/s against 94 on f16, 2026-11-29). One device call: the 4-bit preset made, then 24 decoded
# tokens profiled (SLUICE_OPENCL_PROFILE=1: per-kernel time and the gaps between launches) with f16,
# turbo3, turbo3 without the recent window (--kv-recent 0) and turbo3 on the generic attention kernel
# (backend option generic-attention); arguments pick some of them. Carry [".bundle_pack"] with
# bundle_fam.tar.xz (sluice, the OpenCL backend, the turbo3 codec). Results: $OUT/probe_*.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d .bundle_fam ] || tar -xJf .bundle_pack/bundle_fam.tar.xz
source .bundle_fam/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_fam/bin; M=/tmp/fam-gemma
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
[ -f $M/config.json ] || timeout 200 "$F/sluice" make-model --preset gemma-4-26b-a4b --bits 4 --out $M --quiet
log made
probe() {  # label, then generate options
  local label=$1; shift
  SLUICE_OPENCL_PROFILE=1 timeout 90 "$F/sluice" generate --model $M --backend opencl --plugin-dir "$F" \
    --prompt "Write a long story about a dragon" --max-tokens 24 "$@" > "$OUT/probe_$label.txt" 2>&1
  log "$label rc=$?"; grep -E "tok/s|launches|gaps" "$OUT/probe_$label.txt" | head -12
}
# Which probes (arguments; all four without any): f16 turbo3 turbo3_norecent turbo3_generic.
want() { [ $# -eq 0 ] && return 0; for a in "$@"; do [ "$a" = "$WANT" ] && return 0; done; return 1; }
WANT=f16; want "$@" && probe f16 --kv-codec f16
WANT=turbo3; want "$@" && probe turbo3 --kv-codec turbo3
WANT=turbo3_norecent; want "$@" && probe turbo3_norecent --kv-codec turbo3 --kv-recent 0
WANT=turbo3_generic; want "$@" && probe turbo3_generic --kv-codec turbo3 --backend-options generic-attention
