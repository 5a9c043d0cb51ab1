#!/bin/bash
# Issue 31's CPU table: Sluice's CPU backend beside llama.cpp on this machine in the same minutes.
# Each round runs, in turn, our `bench_model` (default int16 activations, then `activations=int8`) and
# the peer's `llama-bench` on the same model shape and
# bytes per weight (qwen2-0.5b preset at MLX 4 / 8 bits against the same shape in Q4_0 / Q8_0), so a
# burst of load from elsewhere lands on both sides rather than one. Every run: pp512 and tg128, median
# (ours) / mean (llama-bench) of 3 after a warm-up, 2 threads. bench_model also prints the decode's
# bytes per token and the read bandwidth it measured in the same run.
#   PEER=/work/peer-cpu bash perf/cpu_peer_run.sh [ROUNDS=3] [FORMS="4 8"] [THREADS=2]
# PEER: a folder with the peer's source unpacked in lcpp/ and built in build/ (CPU, native):
#   tar xzf ../shared/peer/llama-cpp-turboquant.tar.gz -C $PEER
#   cmake -S $PEER/lcpp -B $PEER/build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
#     -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_WEBUI=OFF && cmake --build $PEER/build -j2 --target llama-bench llama-quantize
# On a host that advertises AMX where its tile instructions fault (a VM without the tile state: llama-bench
# dies with SIGILL in ggml_backend_amx_mul_mat), build with -DGGML_NATIVE=OFF and the ISA spelled out:
#   -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON
#   -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX_VNNI=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
set -eu
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-3}
FORMS=${FORMS:-"4 8"}
THREADS=${THREADS:-2}
MODELS=${MODELS_DIR:-/tmp/sluice-models}
PEER=${PEER:?set PEER to the folder of the peer build, see the header}
mkdir -p "$MODELS"
for bits in $FORMS; do
  [ -f "$MODELS/qwen2-0.5b-${bits}bit/config.json" ] ||
    "$BUILD/bin/sluice" make-model --preset qwen2-0.5b --bits $bits --seed 1 --out "$MODELS/qwen2-0.5b-${bits}bit"
done
# The peer's model: the same shape with random weights (f16), quantized by its own tool.
[ -f "$PEER/q05-f16.gguf" ] ||
  PYTHONPATH="$PEER/lcpp/gguf-py" /usr/bin/python3 ../shared/peer/gguf_qwen2.py 0.5b models/tiny-code-qwen2 "$PEER/q05-f16.gguf"
for bits in $FORMS; do
  [ -f "$PEER/q05-q${bits}_0.gguf" ] || "$PEER/build/bin/llama-quantize" "$PEER/q05-f16.gguf" "$PEER/q05-q${bits}_0.gguf" "Q${bits}_0" > /dev/null 2>&1
done
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (+ uncommitted changes)'), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) CPUs"
for round in $(seq "$ROUNDS"); do
  for bits in $FORMS; do
    for options in "" "activations=int8"; do  # the default int16 activations, then the opt-in int8 ones
      echo "round $round, ${bits}-bit ${options:-default}, load $(cut -d' ' -f1 /proc/loadavg)"
      "$BUILD/bin/bench_model" --model "$MODELS/qwen2-0.5b-${bits}bit" --threads "$THREADS" --reps 3 --pp 512 --tg 128 \
        --plugin-dir "$BUILD/lib" --backend-options "$options" 2>&1 | grep -E '^\| |decode reads'
    done
    echo "round $round, Q${bits}_0, load $(cut -d' ' -f1 /proc/loadavg)"
    "$PEER/build/bin/llama-bench" -m "$PEER/q05-q${bits}_0.gguf" -t "$THREADS" -r 3 -p 512 -n 128 -o md 2>/dev/null | grep -E '^\| qwen2'
  done
done
