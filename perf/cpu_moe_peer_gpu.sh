#!/bin/bash
# Issue 31's second table: the qwen3-30b-a3b 4-bit preset on the GPU machine's CPU cores (16 threads)
# beside llama.cpp's CPU build on the same shape and bytes per weight (Q4_0), in the same sitting, two
# device calls back to back (the machine keeps /tmp while calls follow each other):
#   start    the peer's CPU-only build (detached); `sluice make-model --preset qwen3-30b-a3b --bits 4`;
#            the peer's GGUF of the same shape, tokenizer and llama-quantize Q4_0 tensor types
#            (perf/gguf_peer_model.py: random weights; the bf16 folder and its conversion would not fit
#            the disk); waits for the build
#   measure N  round N (a call each, alternating within it): ours with experts resident, ours with
#            experts streamed through io_uring under a quarter of their bytes (`uring@25%`), then
#            llama-bench (pp512, tg128). A/B: a second build of the plugins bundled as bin512_variant
#            adds its resident row (and its streamed one with STREAMED_VARIANT=1); SKIP_STREAMED=1
#            leaves the streamed rows out.
#   cgroup   llama-bench in a memory cgroup as small as our streamed row's resident set (mmap paging
#            in what does not fit), if the machine lets us make one
# Our side: `sluice bench` rows at --ctx 0 (decode at depth 0, as tg128) and --ctx 512 (prefill 512
# tokens, as pp512), each with the read bandwidth measured on the same cores before the rows.
#
# Here, first (bundles are ignored by git): the CPU backend's kernels are chosen when compiling, so the
# bundle carries two builds of the CPU plugin: AVX-512 (icelake-server, used when the machine's flags
# have avx512_vnni) and AVX2 (x86-64-v3, with the program itself):
#   cmake -S . -B build-dev3 -DSLUICE_ARCH=x86-64-v3 -DSLUICE_TESTS=OFF
#   cmake -S . -B build-dev512 -DSLUICE_ARCH=icelake-server -DSLUICE_TESTS=OFF
#   cmake --build build-dev3 -j2 --target sluice sluice-backend-cpu sluice-expertstore-uring
#   cmake --build build-dev512 -j2 --target sluice-backend-cpu
#   ../shared/device/bundle.sh .bundle_cpu build-dev3/bin/sluice build-dev3/lib/sluice-backend-cpu.so \
#     build-dev3/lib/sluice-expertstore-uring.so && strip .bundle_cpu/bin/*
#   mkdir .bundle_cpu/bin512 && cp build-dev512/lib/sluice-backend-cpu.so .bundle_cpu/bin/sluice-expertstore-uring.so \
#     .bundle_cpu/bin512/ && strip .bundle_cpu/bin512/*
# (Where this machine's CPU flags equal the GPU machine's — machine.txt of an earlier sitting — the
# native build/ runs there as it is: build/bin/sluice and build/lib's plugins in bin/ and bin512/.)
#   mkdir -p .bundle_pack && tar -cJf .bundle_pack/bundle_cpu.tar.xz .bundle_cpu
#   mkdir -p .peer && cp ../shared/peer/llama-cpp-turboquant.tar.gz .peer/
# Device calls (carry [".bundle_pack", ".peer"]): bash perf/cpu_moe_peer_gpu.sh start, then at once
# measure 1, measure 2, cgroup. Results: $OUT (progress.txt, machine.txt, cpu_moe.tar.gz).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# The bundle travels packed (its OpenBLAS alone is 36 MB of a call's 64 MiB).
[ -f /tmp/bcpu/.bundle_cpu/activate.sh ] || { mkdir -p /tmp/bcpu && tar -xJf .bundle_pack/bundle_cpu.tar.xz -C /tmp/bcpu; }
source /tmp/bcpu/.bundle_cpu/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
W=/tmp/peer-cpu; L=$W/build/bin; M=/tmp/q30; G=/tmp/q30-q4_0.gguf; R=/tmp/cpu_moe; THREADS=16
mkdir -p $R
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
pack() { cp $R/*.md $R/*.txt "$OUT/" 2>/dev/null; tar -czf "$OUT/cpu_moe.tar.gz" -C $R . ; }
trap pack EXIT
PLUGINS=/tmp/bcpu/.bundle_cpu/bin
grep -qw avx512_vnni /proc/cpuinfo && PLUGINS=/tmp/bcpu/.bundle_cpu/bin512
case "${1:-}" in
start)
  { lscpu; free -g; df -h /tmp | tail -1; cat /proc/loadavg; echo "plugins: $PLUGINS"; } > "$OUT/machine.txt" 2>&1
  if [ ! -f $W/build.log ]; then
    mkdir -p $W && tar xzf .peer/llama-cpp-turboquant.tar.gz -C $W
    setsid bash -c "cmake -S $W/lcpp -B $W/build -DGGML_CUDA=OFF -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_WEBUI=OFF -DCMAKE_BUILD_TYPE=Release > $W/build.log 2>&1 && \
      cmake --build $W/build -j8 --target llama-bench >> $W/build.log 2>&1; echo BUILD_RC=\$? >> $W/build.log" \
      > /dev/null 2>&1 < /dev/null &
  fi
  log make-model
  [ -f $M/config.json ] || ( time timeout 300 sluice make-model --preset qwen3-30b-a3b --bits 4 --out $M --quiet ) > $R/make_model.txt 2>&1
  log gguf
  [ -f $G ] || ( time PYTHONPATH=$W/lcpp/gguf-py timeout 300 python3 perf/gguf_peer_model.py $M $G ) > $R/gguf.txt 2>&1
  tail -n 3 $R/make_model.txt $R/gguf.txt | tee -a "$OUT/progress.txt"
  for i in $(seq 1 100); do grep -q BUILD_RC $W/build.log 2>/dev/null && break; sleep 3; done
  tail -n 2 $W/build.log | tee -a "$OUT/progress.txt"
  du -sh $M $G | tee -a "$OUT/progress.txt"
  log start done ;;
measure)
  ours() {  # label, expert store[, plugin folder]
    log "ours $1"
    timeout 240 sluice bench --model $M --backends cpu --threads $THREADS --plugin-dir "${3:-$PLUGINS}" --expert-stores "$2" \
      --ctx 0,512 --gen 128 --reps 2 --row-timeout 110 --json-out $R/$1.json > $R/$1.md 2> $R/$1.log
    cat $R/$1.md >> $R/rounds.md
  }
  peer() {  # label
    log "peer $1"
    timeout 200 $L/llama-bench -m $G -t $THREADS -p 512 -n 128 -r 2 -o md > $R/$1.md 2> $R/$1.log
    cat $R/$1.md >> $R/rounds.md
  }
  round=${2:-1}
  echo "## round $round (load $(cut -d' ' -f1 /proc/loadavg))" >> $R/rounds.md
  # (Resident rows read the model's files through the page cache before timing: `sluice bench` since
  # this sitting; the sitting itself did it here with cat, round 3.)
  ours resident_$round resident
  # A second build of the plugins (A/B, bundled as bin512_variant): its resident row, and its streamed one
  # with STREAMED_VARIANT=1.
  [ -d "${PLUGINS}_variant" ] && ours residentvariant_$round resident "${PLUGINS}_variant"
  if [ "${SKIP_STREAMED:-0}" != 1 ]; then
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null  # the streamed row reads with O_DIRECT: a cold start either way
    ours uring25_$round "uring@25%"
    if [ -d "${PLUGINS}_variant" ] && [ "${STREAMED_VARIANT:-0}" = 1 ]; then
      sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
      ours uring25variant_$round "uring@25%" "${PLUGINS}_variant"
    fi
  fi
  peer peer_$round
  log "round $round done" ;;
cgroup)
  # The peer with as much memory as our streamed row kept resident (its peak RSS), paging the rest
  # through mmap.
  rss=$(python3 -c "import json; print(max(r.get('peak_rss_mb', 0) for r in json.load(open('$R/uring25_1.json'))['rows']))" 2>/dev/null)
  cg=/sys/fs/cgroup/sluice_peer
  if [ -n "$rss" ] && mkdir -p $cg 2>/dev/null && echo "$((${rss%.*} * 1024 * 1024))" > $cg/memory.max 2>/dev/null; then
    sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null
    log "peer in a ${rss} MB cgroup"
    ( echo $BASHPID > $cg/cgroup.procs && exec timeout 240 $L/llama-bench -m $G -t $THREADS -p 512 -n 32 -r 1 -o md ) \
      > $R/peer_cgroup.md 2> $R/peer_cgroup.log
    echo "memory.max ${rss} MB; $(grep -E 'oom|max' $cg/memory.events 2>/dev/null | tr '\n' ' ')" >> $R/peer_cgroup.md
  else
    echo "no memory cgroup could be made here (rss '${rss}')" > $R/peer_cgroup.md
  fi
  log measure done ;;
*) echo "usage: $0 start|measure N|cgroup" >&2; exit 2 ;;
esac
