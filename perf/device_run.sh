# Sourced by the device-call scripts (perf/*_gpu_run.sh; ../shared/device/README.md): the bundle's
# environment, a logger, and — with device_run_packed — everything written under one folder packed
# into $OUT/NAME.tar.gz on exit, so one call returns one file however many it wrote.
#   source perf/device_run.sh; device_run_packed NAME     (then write under $OUT; log "step")
#   source perf/device_run.sh; device_run_env             (write under $OUT as it is)

# The carried bundle's libraries and programs; tests find plugins at the build directory they were
# built in (build-device/lib), so that path points at the bundle.
device_run_env() {
  OUT=${OUT:-/tmp/out}
  mkdir -p "$OUT"
  source .bundle/activate.sh
  export SLUICE_CACHE_DIR=/tmp/sluice-cache
  B=.bundle/bin
  mkdir -p /work/main/build-device 2>/dev/null && ln -sfn "$PWD/$B" /work/main/build-device/lib 2>/dev/null
  log start
}

log() { echo "[$(date +%T)] $*" | tee -a "$OUT/progress.txt"; }

device_run_packed() {
  FINAL=${OUT:-/tmp/out}
  OUT=/tmp/$1_out
  rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL"
  trap 'tar -czf "$FINAL/'"$1"'.tar.gz" -C "$OUT" . ; cp "$OUT/progress.txt" "$FINAL/" 2>/dev/null' EXIT
  device_run_env
}

# The llama3-8b 4-bit preset (sluice make-model) at $MODEL, made once per machine start.
device_llama3_model() {
  log make-model
  MODEL=/tmp/llama3-8b-4bit
  [ -f $MODEL/config.json ] || ( time timeout 180 sluice make-model --preset llama3-8b --bits 4 --out $MODEL ) \
    > "$OUT/make_model.txt" 2>&1
}

# Runs a command with a knob setting: its parts (commas or spaces between them) are environment
# assignments (NAME=VALUE, upper case: the diagnostics, e.g. SLUICE_OPENCL_PROFILE=1)
# or OpenCL backend options (tune.KEY=VALUE, tuning=FILE, flags), appended to the command as
# --backend-options (bench_depth, bench_quant_matvec).
#   with_knobs "tune.att_wg=128,no-glu-join" timeout 100 $B/bench_depth --model ...
with_knobs() {
  local setting=$1 part
  shift
  local envs=() opts=()
  for part in ${setting//,/ }; do
    case $part in
      [A-Z]*=*) envs+=("$part") ;;
      *) opts+=("$part") ;;
    esac
  done
  local cmd=("$@")
  [ ${#opts[@]} -gt 0 ] && cmd+=(--backend-options "${opts[*]}")
  env ${envs[@]+"${envs[@]}"} "${cmd[@]}"
}

# Kernel time per kernel (SLUICE_OPENCL_PROFILE=1) over 8 decode steps at depth 32768, per codec given:
# $OUT/profile_CODEC.txt.
device_profile_depth32k() {
  for codec in "$@"; do
    log "profile $codec"
    SLUICE_OPENCL_PROFILE=1 timeout 60 $B/bench_depth --model $MODEL --backend opencl --plugin-dir $B --kv-codec $codec \
      --depths 32768 --pp 16 --tg 8 > "$OUT/profile_${codec}.txt" 2>&1
  done
}
