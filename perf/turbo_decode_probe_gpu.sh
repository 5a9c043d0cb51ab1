#!/bin/bash
# Decode over the turbo3 cache at depth on NVIDIA, ours only (issue 30 asks turbo3 ≥ 1.3× our own f16
# cache at 32768 on llama3-8b 4-bit; the peer is not needed for that ratio). One device call: the
# preset made (~15 s), then, alternating f16 and turbo3, bench_depth's tg64 at depth 0 and 32768, a
# kernel profile of 32 decoded tokens at 32768 (SLUICE_OPENCL_PROFILE=1), and the arguments' backend
# options as extra rows (each "label=opts", e.g. wg128=tune.att_wg=128; at ROW_DEPTHS, default 32768).
# Carry [".bundle_pack"] with bundle_td.tar.xz:
#   ../shared/device/bundle.sh .bundle_td build/bin/sluice build/bin/bench_depth \
#     build/lib/sluice-backend-opencl.so build/lib/sluice-kvcodec-*.so \
#     [build/lib/sluice-backend-cpu.so build/bin/opencl_fused_attention_test build/bin/kvcodec_opencl_source_test]
#   strip .bundle_td/bin/*; tar -cJf .bundle_pack/bundle_td.tar.xz .bundle_td
# (the bracketed files for TESTS=1: the fused test compares with the CPU backend). Environment:
# ROW_DEPTHS (e.g. 0,8192,32768), PROFILE=0 (option rows only), SAME_IDS=1, TESTS=1 with TEST_OPTIONS.
# The GPU tests compile ~40 programs cold: ~5 minutes of device time a run on the H200.
# Results: $OUT/td.tar.gz (the rows, profiles and test outputs; a call brings back few files), a
# summary line each in $OUT/progress.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d .bundle_td ] || tar -xJf .bundle_pack/bundle_td.tar.xz
source .bundle_td/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_td/bin; M=/tmp/llama3-8b-4bit; R=/tmp/td
rm -rf $R; mkdir -p $R
trap 'tar -czf "$OUT/td.tar.gz" -C $R .' EXIT
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/machine.txt 2>&1
[ -f $M/config.json ] || timeout 200 "$F/sluice" make-model --preset llama3-8b --bits 4 --out $M --quiet
log made
row() {  # label codec depths [backend options]
  timeout 150 "$F/bench_depth" --model $M --backend opencl --plugin-dir "$F" --kv-codec "$2" --depths "$3" \
    --pp 512 --tg 64 ${4:+--backend-options "$4"} > $R/row_$1.txt 2>&1
  log "$1 rc=$? $(grep -E '^\| llama' $R/row_$1.txt | awk -F'|' '{printf "[d%s pp%s tg%s]", $5, $6, $7}')"
}
prof() {  # label codec [backend options]
  SLUICE_OPENCL_PROFILE=1 timeout 150 "$F/bench_depth" --model $M --backend opencl --plugin-dir "$F" --kv-codec "$2" \
    --depths 32768 --pp 512 --tg 32 ${3:+--backend-options "$3"} > $R/prof_$1.txt 2>&1
  log "prof $1 rc=$?"; grep -E "attention|merge|launches," $R/prof_$1.txt | head -8
}
if [ "${PROFILE:-1}" = 1 ]; then
  row f16_a f16 ${ROW_DEPTHS:-0,32768}
  row turbo3_a turbo3 ${ROW_DEPTHS:-0,32768}
  prof f16 f16
  prof turbo3 turbo3
fi
for spec in "$@"; do
  label=${spec%%=*}; opts=${spec#*=}
  row "turbo3_$label" turbo3 "${ROW_DEPTHS:-32768}" "$opts"
done
[ "${PROFILE:-1}" = 1 ] && { row f16_b f16 ${ROW_DEPTHS:-0,32768}; row turbo3_b turbo3 ${ROW_DEPTHS:-0,32768}; }
# SAME_IDS=1: 32 greedy tokens over turbo3 through the fused kernel and through the generic one
# (backend option tune.fused_attention=0): the same ids expected.
if [ "${SAME_IDS:-0}" = 1 ]; then
  for a in fused generic; do
    o=; [ $a = generic ] && o="--backend-options tune.fused_attention=0"
    timeout 120 "$F/sluice" generate --model $M --backend opencl --plugin-dir "$F" --kv-codec turbo3 --max-tokens 32 --json \
      --prompt "The history of the river begins" $o > $R/ids_$a.txt 2>&1
  done
  ids() { grep -o '"ids":\[[0-9,]*\]' "$1"; }
  [ -n "$(ids $R/ids_fused.txt)" ] && [ "$(ids $R/ids_fused.txt)" = "$(ids $R/ids_generic.txt)" ] && log "same ids: yes" || log "same ids: NO"
fi
# TESTS=1: then the GPU tests of the paths measured (they look for the paths they were built with).
if [ "${TESTS:-0}" = 1 ]; then
  mkdir -p /work && ln -sfn $PWD /work/main; mkdir -p build && ln -sfn "$F" build/lib
  timeout 120 "$F/kvcodec_opencl_source_test" > $R/t_kvcodec_source.txt 2>&1; log "kvcodec_opencl_source_test rc=$?"
  timeout 360 "$F/opencl_fused_attention_test" > $R/t_fused.txt 2>&1; log "opencl_fused_attention_test rc=$?"
  grep -E "Failure|FAILED|Expected|Which is|worst|error" $R/t_fused.txt | head -20 | tee -a "$OUT/progress.txt"
  [ -n "${TEST_OPTIONS:-}" ] && { SLUICE_TEST_BACKEND_OPTIONS="$TEST_OPTIONS" timeout 360 "$F/opencl_fused_attention_test" \
    > $R/t_fused_opts.txt 2>&1; log "opencl_fused_attention_test ($TEST_OPTIONS) rc=$?"; }
fi
log done
