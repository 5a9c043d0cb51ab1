#!/bin/bash
# Speculative decoding beside llama.cpp's on the GPU machine (issue 27), and single-stream decode at depth 0
# (issue 29), two device calls back to back (the machine keeps /tmp while calls follow each other):
#   start    the peer's build (detached); one Llama-3-8B-shaped model with random bf16 weights made with
#            transformers (kept, unlike llamacpp_gpu.sh's) and converted for both (Sluice 4-bit with
#            `sluice quantize`, llama.cpp f16 GGUF then Q4_0); the bundled model (trained on code) for
#            both (Sluice bf16 target and 4-bit draft; llama.cpp f16 target and Q4_0 draft); a
#            Llama-3.2-1B-shaped draft for the 8B target (the llama3.2-1b preset's shape; 4-bit / Q4_0)
#   measure  the OpenCL op tests while the peer builds; then, on a quiet machine, each
#            configuration served alone and single-stream greedy decode of code prompts timed by one
#            client for both servers (perf/decode_stream_client.py): plain, n-gram drafting, draft
#            model
#   depth    bench_depth at depths 0 and 32768 (decode tg128, prefill pp512) beside llama-bench (issue 29)
# With random weights no guess is ever kept (the 8B rows measure what drafting costs when it fails);
# the bundled model's rows have guesses that are kept. The first sitting (2026-11-28 04:00) also ran
# a 2-bit draft of the 8B model (its `measure` then had draft2 rows; perf/results/speculative.md).
#
# Here, first (the bundle is ignored by git):
#   ../shared/device/bundle.sh .bundle_spec build/bin/sluice build/bin/bench_depth build/lib/sluice-backend-opencl.so \
#     build/bin/opencl_backend_ops_test && strip .bundle_spec/bin/*
#   (not the conformance test: it needs the CPU plugin, whose OpenBLAS alone would take the call's 64 MiB)
#   cp ../shared/golden/eval_code_ids.json .bundle_spec/
# Device calls (kind nvidia-h200 or nvidia-h100-x1, carry [".bundle_spec", ".peer"]): bash perf/speculative_peer_gpu.sh start,
# then at once bash perf/speculative_peer_gpu.sh measure, then depth (tar $OUT: more files than a call brings back).
set -u
source .bundle_spec/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_spec/bin
W=/tmp/peer; L=$W/build/bin; S=/tmp/spec
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
IDS=$PWD/.bundle_spec/eval_code_ids.json
client() { timeout 240 python3 perf/decode_stream_client.py --url "http://127.0.0.1:$1" --ids "$IDS" --prompts 4 --prompt-len 256 --gen 128 --label "$2" >> "$OUT/spec_runs.jsonl" 2>> "$OUT/client_err.txt"; }
wait_health() { for i in $(seq 1 150); do curl -sf "http://127.0.0.1:$1/health" > /dev/null && return 0; sleep 1; done; return 1; }
ours() {  # label, model folder, extra serve flags
  local label=$1 model=$2; shift 2
  grep -qx "$label" $S/done 2>/dev/null && return  # measured by an earlier call of this sitting
  setsid "$F/sluice" serve --model $model --backend opencl --plugin-dir "$F" --kv-codec f16 --port 8090 --ctx-size 4096 "$@" \
    > "$OUT/serve_$label.txt" 2>&1 < /dev/null &
  local pid=$!
  wait_health 8090 && client 8090 "$label" && echo "$label" >> $S/done || echo "$label: server not ready" >> "$OUT/progress.txt"
  kill $pid; wait $pid 2>/dev/null; log "$label"
}
peer() {  # label, GGUF, extra llama-server flags
  local label=$1 model=$2; shift 2
  grep -qx "$label" $S/done 2>/dev/null && return
  setsid $L/llama-server -m $model -ngl 99 -fa on -c 4096 -np 1 --port 8091 "$@" > "$OUT/serve_$label.txt" 2>&1 < /dev/null &
  local pid=$!
  wait_health 8091 && client 8091 "$label" && echo "$label" >> $S/done || echo "$label: server not ready" >> "$OUT/progress.txt"
  kill $pid; wait $pid 2>/dev/null; log "$label"
}
case "${1:-}" in
start)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$OUT/machine.txt" 2>&1
  mkdir -p $W $S
  if [ ! -f $W/build.log ]; then
    tar xzf .peer/llama-cpp-turboquant.tar.gz -C $W
    setsid bash -c "cd $W/lcpp && cmake -S . -B $W/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_WEBUI=OFF -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release > $W/build.log 2>&1 && \
      cmake --build $W/build -j12 --target llama-quantize llama-server llama-bench -- -k >> $W/build.log 2>&1; \
      echo BUILD_RC=\$? >> $W/build.log" > /dev/null 2>&1 < /dev/null &
  fi
  if [ ! -f $S/hf/config.json ]; then
    TOKDIR=models/tiny-code-qwen2 python3 - <<'PY' 2>&1 | tail -3 >> "$OUT/progress.txt"
import os, shutil, torch
from transformers import AutoConfig, AutoModelForCausalLM
torch.manual_seed(0)
cfg = AutoConfig.for_model("llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
    tie_word_embeddings=False, eos_token_id=2, bos_token_id=None)
with torch.device("cuda"):
    m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
m.save_pretrained("/tmp/spec/hf", max_shard_size="4GB")
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(os.path.join(os.environ["TOKDIR"], f), "/tmp/spec/hf")
PY
  fi
  log hf_model
  # The draft: a Llama-3.2-1B-shaped model (the llama3.2-1b preset's shape) of the same vocabulary.
  if [ ! -f $S/hf1b/config.json ]; then
    TOKDIR=models/tiny-code-qwen2 python3 - <<'PY' 2>&1 | tail -3 >> "$OUT/progress.txt"
import os, shutil, torch
from transformers import AutoConfig, AutoModelForCausalLM
torch.manual_seed(1)
cfg = AutoConfig.for_model("llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
    num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, rope_theta=500000.0,
    rms_norm_eps=1e-5, tie_word_embeddings=True, eos_token_id=2, bos_token_id=None)
with torch.device("cuda"):
    m = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
m.save_pretrained("/tmp/spec/hf1b", max_shard_size="4GB")
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(os.path.join(os.environ["TOKDIR"], f), "/tmp/spec/hf1b")
PY
  fi
  [ -d $S/s1b4 ] || timeout 120 "$F/sluice" quantize --model $S/hf1b --out $S/s1b4 --bits 4 --quiet > "$OUT/quantize1b.txt" 2>&1
  [ -d $S/s4 ] || timeout 300 "$F/sluice" quantize --model $S/hf --out $S/s4 --bits 4 --quiet > "$OUT/quantize4.txt" 2>&1; log sluice_4bit
  [ -d $S/t4 ] || timeout 60 "$F/sluice" quantize --model models/tiny-code-qwen2 --out $S/t4 --bits 4 --quiet > "$OUT/quantize_tiny.txt" 2>&1
  if [ ! -f $S/p-f16.gguf ]; then
    sed -i 's/raise NotImplementedError("BPE pre-tokenizer was not recognized - update get_vocab_base_pre()")/res = "qwen2"/' $W/lcpp/convert_hf_to_gguf.py
    PYTHONPATH=$W/lcpp/gguf-py timeout 400 python3 $W/lcpp/convert_hf_to_gguf.py $S/hf --outtype f16 --outfile $S/p-f16.gguf > "$OUT/convert.txt" 2>&1
  fi
  [ -f $S/p1b-f16.gguf ] || PYTHONPATH=$W/lcpp/gguf-py timeout 200 python3 $W/lcpp/convert_hf_to_gguf.py $S/hf1b --outtype f16 \
    --outfile $S/p1b-f16.gguf > "$OUT/convert1b.txt" 2>&1
  [ -f $S/t-f16.gguf ] || PYTHONPATH=$W/lcpp/gguf-py timeout 100 python3 $W/lcpp/convert_hf_to_gguf.py models/tiny-code-qwen2 --outtype f16 \
    --outfile $S/t-f16.gguf > "$OUT/convert_tiny.txt" 2>&1
  log peer_f16; ls -la $S >> "$OUT/progress.txt"; tail -1 $W/build.log >> "$OUT/progress.txt" ;;
measure)
  # While the peer builds (its compiler would slow the timed runs): the OpenCL op
  # tests on the NVIDIA driver, where the vendor paths run (not in CI).
  mkdir -p /work && ln -sfn $PWD /work/main; mkdir -p build && ln -sfn "$F" build/lib
  [ -f $S/tested ] || for t in opencl_backend_ops_test; do
    timeout 90 "$F/$t" > "$OUT/t_$t.txt" 2>&1; echo "$t rc=$?" >> "$OUT/progress.txt"
  done
  grep -hE "^\[  (PASSED|FAILED|SKIPPED)|Failure|^\[  FAILED" "$OUT"/t_*.txt 2>/dev/null | head -30 >> "$OUT/progress.txt"; touch $S/tested; log tests
  for i in $(seq 1 100); do grep -q BUILD_RC $W/build.log 2>/dev/null && break; sleep 5; done
  tail -2 $W/build.log > "$OUT/peer_build.txt"; log peer_built
  [ -f $S/p-q4_0.gguf ] || $L/llama-quantize $S/p-f16.gguf $S/p-q4_0.gguf Q4_0 > "$OUT/peer_quant.txt" 2>&1
  [ -f $S/p1b-q4_0.gguf ] || $L/llama-quantize $S/p1b-f16.gguf $S/p1b-q4_0.gguf Q4_0 >> "$OUT/peer_quant.txt" 2>&1
  [ -f $S/t-q4_0.gguf ] || $L/llama-quantize $S/t-f16.gguf $S/t-q4_0.gguf Q4_0 >> "$OUT/peer_quant.txt" 2>&1
  log peer_quantized
  ours ours_plain $S/s4
  peer peer_plain $S/p-q4_0.gguf
  ours ours_ngram $S/s4 --draft ngram --num-draft-tokens 8
  peer peer_ngram $S/p-q4_0.gguf --spec-type ngram-simple --draft-max 8
  ours ours_draft1b $S/s4 --draft-model $S/s1b4 --num-draft-tokens 8
  peer peer_draft1b $S/p-q4_0.gguf -md $S/p1b-q4_0.gguf -ngld 99 --draft-max 8 --draft-p-min 0
  ours ours_plain_again $S/s4
  # The bundled model (trained on code): guesses that are kept.
  ours tiny_ours_plain models/tiny-code-qwen2
  peer tiny_peer_plain $S/t-f16.gguf
  ours tiny_ours_ngram models/tiny-code-qwen2 --draft ngram --num-draft-tokens 8
  peer tiny_peer_ngram $S/t-f16.gguf --spec-type ngram-simple --draft-max 8
  ours tiny_ours_draft4 models/tiny-code-qwen2 --draft-model $S/t4 --num-draft-tokens 8
  peer tiny_peer_draft4 $S/t-f16.gguf -md $S/t-q4_0.gguf -ngld 99 --draft-max 8
  ours tiny_ours_plain_again models/tiny-code-qwen2 ;;
depth)
  # Issue 29's single-stream figures (decode at depth 0 and 32768, prefill pp512) beside llama-bench on
  # the same weights, alternating twice.
  for r in 1 2; do
    timeout 200 "$F/bench_depth" --model $S/s4 --backend opencl --plugin-dir "$F" --depths 0,32768 --pp 512 --tg 128 --reps 3 \
      >> "$OUT/ours_depth.txt" 2>&1; log "ours depth $r"
    timeout 200 $L/llama-bench -m $S/p-q4_0.gguf -ngl 99 -fa 1 -p 512 -n 128 -d 0,32768 -r 3 -o md >> "$OUT/peer_depth.txt" 2>&1
    log "peer depth $r"
  done ;;
*) echo "usage: $0 start|measure|depth" >&2; exit 2 ;;
esac
