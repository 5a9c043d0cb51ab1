#!/bin/bash
# The tokenizer harness as N independent libFuzzer processes (-jobs=N -workers=N) sharing one corpus,
# run_fuzzers.sh's limits; each worker's "Done N runs" summed.
set -u
H=$PWD/.bundle/fuzz; source $H/activate.sh
W=/tmp/fz; rm -rf $W; mkdir -p $W/art_tok $W/logs; tar xzf $H/${CORPUS:-corpus.tar.gz} -C $W
export SLUICE_REFERENCE_DIR=$H/ref ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1
export TMPDIR=$(mktemp -d /dev/shm/fz.XXXXXX)
N=$(nproc); T=${SECS:-480}
cd $W/logs
$H/bin/fuzz_tokenizer -jobs=$N -workers=$N -max_total_time=$T -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 -print_final_stats=1 \
  -max_len=1024 -artifact_prefix=$W/art_tok/ $W/corpus/tokenizer $W/seeds/tokenizer > $OUT/parent.log 2>&1
echo "workers: $N"; lscpu | grep "Model name"
total=0; for f in fuzz-*.log; do n=$(grep -o "Done [0-9]* runs" $f | awk '{print $2}'); echo "$f ${n:-none}"; total=$((total + ${n:-0})); done
echo "total executions: $total"
grep -l -E "ERROR|deadly signal|Test unit written" fuzz-*.log | head
ls -la $W/art_tok; cp $W/art_tok/* $OUT/ 2>/dev/null; tail -3 fuzz-0.log
