#!/usr/bin/env bash
# Runs each libFuzzer harness of BUILD_DIR (built with -DSLUICE_FUZZ=ON) for SECONDS, one at a time, one
# process each. Under BUILD_DIR/fuzz/: seeds/<name> (rebuilt from the reference data every run),
# corpus/<name> (kept between runs: what libFuzzer found interesting), artifacts/<name> (crash-*, leak-*,
# timeout-*, oom-* reproducers), logs/<name>.log. Exits non-zero if any harness found something, naming
# the reproducer and the command that replays it.
# Usage: run_fuzzers.sh BUILD_DIR SECONDS [HARNESS...]   (environment: SLUICE_REFERENCE_DIR, FUZZ_RSS_MB)
set -uo pipefail

build=$(cd "$1" && pwd)
seconds=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
reference=${SLUICE_REFERENCE_DIR:-$here/../../../shared}
# The harnesses load real tokenizers and templates and start from real files: without the reference
# data they are skipped with a message, as the tests that need it are.
if ! reference=$(cd "$reference" 2>/dev/null && pwd) || [ ! -d "$reference/golden" ]; then
  echo "fuzz: no reference data at ${SLUICE_REFERENCE_DIR:-$here/../../../shared}: every harness skipped"
  echo "0 passed, 0 failed"
  exit 0
fi
rss_mb=${FUZZ_RSS_MB:-2048}

# name  max_len  dictionary. max_len fits the largest real seed; longer inputs only slow each execution.
harnesses=(
  "request       16384 json.dict"
  "safetensors   20480 safetensors.dict"
  "model_config   4096 model_config.dict"
  "tokenizer      1024 -"
  "jinja         20480 jinja.dict"
  "sse_stop       1024 -"
  "toolcall       2048 toolcall.dict"
  "hub_names      1024 -"
  "schema         4096 json.dict"
)
wanted=("$@")

work=$build/fuzz
mkdir -p "$work"/{seeds,corpus,artifacts,logs}
python3 "$here/make_seeds.py" "$reference" "$work/seeds" || exit 2

export SLUICE_REFERENCE_DIR=$reference
# The harnesses' scratch files (inputs written for the readers that take a path), in memory where there
# is /dev/shm; removed here since a harness that stops on a finding cannot clean up after itself.
scratch=$(mktemp -d /dev/shm/sluice-fuzz-run.XXXXXX 2>/dev/null || mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export TMPDIR=$scratch
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

passed=0
failed=0
summary=()
for entry in "${harnesses[@]}"; do
  read -r name max_len dict <<<"$entry"
  if ((${#wanted[@]})) && [[ ! " ${wanted[*]} " == *" $name "* ]]; then continue; fi
  binary=$build/bin/fuzz_$name
  log=$work/logs/$name.log
  mkdir -p "$work/corpus/$name" "$work/artifacts/$name"
  args=(-max_total_time="$seconds" -max_len="$max_len" -rss_limit_mb="$rss_mb" -malloc_limit_mb="$rss_mb"
        -timeout=10 -print_final_stats=1 -artifact_prefix="$work/artifacts/$name/")
  [ "$dict" != "-" ] && args+=(-dict="$here/dicts/$dict")
  echo "fuzz: $name for ${seconds}s (log: $log)"
  # The outer timeout only guards against a harness that ignores its own limits.
  timeout --kill-after=30 $((seconds + 300)) "$binary" "${args[@]}" "$work/corpus/$name" "$work/seeds/$name" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corpus=$(find "$work/corpus/$name" -type f | wc -l)
  if [ $rc -eq 0 ]; then
    passed=$((passed + 1))
    summary+=("$(printf '%-13s passed  %12s execs  %8s exec/s  corpus %s' "$name" "${execs:-?}" "${rate:-?}" "$corpus")")
  else
    failed=$((failed + 1))
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    summary+=("$(printf '%-13s FAILED  (exit %s)  reproducer: %s' "$name" "$rc" "${artifact:-none written; see $log}")")
    grep -E "^(SUMMARY|FUZZ_CHECK|==[0-9]+==ERROR)" "$log" | head -3 | sed 's/^/  /'
    [ -n "$artifact" ] && echo "  replay: SLUICE_REFERENCE_DIR=$reference $binary $artifact"
  fi
done

printf '%s\n' "${summary[@]}"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
