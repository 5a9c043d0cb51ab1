#!/bin/bash
# Issue 24's model-family figures on the GPU machine: our gemma-4-26b-a4b and qwen3.5-35b-a3b 4-bit
# presets beside llama.cpp (CUDA) on the same shapes and bytes per weight (Q4_0), in one sitting on one
# warm machine. The peer's GGUFs are written by perf/gguf_peer_model.py from our folders' config.json and
# tokenizer.json (random weights in llama-quantize's Q4_0 tensor types; its gemma4/qwen35moe mapping is
# proven against the zoo2 goldens by perf/gguf_peer_check.sh, perf/NOTES.md 2026-11-28). Both pairs do
# not fit the 64 GiB disk at once (~30 GB for Gemma's, ~40 GB for Qwen's), so one family at a time.
# Device calls back to back (the machine keeps /tmp while calls follow each other; ≤10 minutes each):
#   start [F]      the peer's CUDA build of llama-bench (detached, ~7 minutes); `sluice make-model
#                  --preset gemma-4-26b-a4b --bits 4` and its GGUF (F = gemma, the default; or qwen)
#   ours gemma     ours (`sluice bench`, OpenCL): f16 and turbo3 caches at --ctx 512 (≈ depth 0) and 32768,
#                  then the experts streamed through io_uring under a quarter of their bytes (uring@25%, f16,
#                  --ctx 512: a streamed prefill of 32768 tokens would re-read the experts 64 times)
#   tests          the GPU-only OpenCL tests in the background (test binaries in the bundle, zoo2 models carried)
#   peer gemma     (with `depth`: bench_depth's pp512/tg32 at depth 0 and 32768, f16 and turbo3, ~5 minutes); then
#                  (after the peer's build) llama-bench pp512/tg128 at -d 0,32768 with its f16 and turbo3
#                  caches (-ctk/-ctv turbo3, as the fork names them)
#   swap           Gemma's pair removed; `sluice make-model --preset qwen3.5-35b-a3b --bits 4` and its GGUF
#                  (without that preset in the bundle's sluice, a config.json of Qwen3.5-35B-A3B's text
#                  shape is written for the GGUF alone and our rows are skipped, said in the table)
#   ours qwen, peer qwen   as for gemma
#   table          $OUT/model_families_peer.md: tokens/s side by side and ours/peer ratios
# What lines up: our --ctx 512 row's prefill is pp512 at depth 0 and its decode is at depth 512 (≈ tg128 at
# depth 0); our --ctx 32768 row's decode is at depth 32768 as the peer's tg128 -d 32768, but its prefill is
# the whole 32768-token prompt's mean (a lower bound beside the peer's pp512 -d 32768): bench_depth's
# pp512 at 32768 is the like-for-like figure where it runs.
#
# Here first (bundles are ignored by git):
#   ../shared/device/bundle.sh .bundle_fam build/bin/sluice build/bin/bench_depth build/lib/sluice-backend-opencl.so \
#     build/lib/sluice-kvcodec-turbo3.so build/lib/sluice-expertstore-uring.so
#   strip .bundle_fam/bin/*; mkdir -p .bundle_pack && tar -cJf .bundle_pack/bundle_fam.tar.xz .bundle_fam
#   mkdir -p .peer && cp ../shared/peer/llama-cpp-turboquant.tar.gz .peer/
# Device calls (carry [".bundle_pack", ".peer"]): bash perf/model_families_peer_gpu.sh start, then at once
# ours gemma short, ours gemma long, ours gemma stream, peer gemma, swap, the same for qwen, table (peer
# waits for the peer's build; `ours F` alone runs all three groups of rows, which may pass a call's 10
# minutes). Leave $OUT as the machine sets it (what is written under it comes back). Split over two
# sittings if a session has less than ~40 minutes: start gemma, …, table; then on a fresh machine start
# qwen, …, table. Results: $OUT (progress.txt, model_families_peer.md, famr.tar.gz with every row's raw
# output). First run: perf/results/model_families_gpu.md (2026-11-29).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d .bundle_fam ] || tar -xJf .bundle_pack/bundle_fam.tar.xz
source .bundle_fam/activate.sh
export SLUICE_CACHE_DIR=/tmp/sluice-cache
F=$PWD/.bundle_fam/bin; W=/tmp/peer-fam; L=$W/build/bin; R=/tmp/famr
mkdir -p $R
log() { echo "[$(date +%T) +${SECONDS}s] $*" | tee -a "$OUT/progress.txt"; }
trap 'tar -czf "$OUT/famr.tar.gz" -C $R . 2>/dev/null; cp $R/*.md "$OUT/" 2>/dev/null' EXIT
model_dir() { echo /tmp/fam-$1; }          # ours (or, without our preset, a config-only folder)
gguf() { echo /tmp/fam-$1-q4_0.gguf; }
preset() { case $1 in gemma) echo gemma-4-26b-a4b ;; qwen) echo qwen3.5-35b-a3b ;; esac; }

make_pair() {  # family: our 4-bit folder (or the config alone) and the peer's GGUF of it
  local f=$1 M; M=$(model_dir $1)
  if "$F/sluice" make-model --list 2>/dev/null | grep -q "^$(preset $f)\b"; then
    [ -f $M/config.json ] || ( time timeout 420 "$F/sluice" make-model --preset "$(preset $f)" --bits 4 --out $M --quiet ) \
      > $R/make_model_$f.txt 2>&1
  else
    echo "no preset $(preset $f) in this sluice: a config for the peer's GGUF alone" | tee $R/make_model_$f.txt
    [ $f = qwen ] || return 1
    # The tokenizer our presets get (make-model's bundled one), taken from a tiny preset.
    mkdir -p $M; [ -f /tmp/tok/tokenizer.json ] || "$F/sluice" make-model --preset tiny-qwen2 --out /tmp/tok --quiet
    cp /tmp/tok/tokenizer.json $M/
    # Qwen3.5-35B-A3B's text shape (its config.json's text_config).
    python3 - $M <<'PY'
import json, sys
L = 40
json.dump({"architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text", "hidden_size": 2048,
           "num_hidden_layers": L, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
           "vocab_size": 248320, "max_position_embeddings": 262144, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
           "layer_types": ["full_attention" if (l + 1) % 4 == 0 else "linear_attention" for l in range(L)],
           "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128,
           "linear_value_head_dim": 128, "linear_num_key_heads": 16, "linear_num_value_heads": 32, "num_experts": 256,
           "num_experts_per_tok": 8, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
           "eos_token_id": 2, "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
           "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10], "mrope_interleaved": True}},
          open(sys.argv[1] + "/config.json", "w"), indent=1)
PY
  fi
  [ -f "$(gguf $f)" ] || ( time PYTHONPATH=$W/lcpp/gguf-py timeout 400 python3 perf/gguf_peer_model.py $M "$(gguf $f)" ) \
    > $R/gguf_$f.txt 2>&1
  tail -n 3 $R/make_model_$f.txt $R/gguf_$f.txt | tee -a "$OUT/progress.txt"
  du -sh $M "$(gguf $f)" | tee -a "$OUT/progress.txt"; df -h /tmp | tail -1 | tee -a "$OUT/progress.txt"
}

case "${1:-}" in
start)
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; df -h /tmp | tail -1; free -g; } > $R/machine.txt 2>&1
  if [ ! -f $W/build.log ]; then
    mkdir -p $W && tar xzf .peer/llama-cpp-turboquant.tar.gz -C $W
    setsid bash -c "cmake -S $W/lcpp -B $W/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_WEBUI=OFF -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release > $W/build.log 2>&1 && \
      cmake --build $W/build -j14 --target llama-bench >> $W/build.log 2>&1; echo BUILD_RC=\$? >> $W/build.log" \
      > /dev/null 2>&1 < /dev/null &
  fi
  make_pair ${2:-gemma}
  log start done ;;
swap)
  rm -rf "$(model_dir gemma)" "$(gguf gemma)"
  make_pair qwen
  log swap done ;;
ours)
  f=${2:?gemma or qwen}; M=$(model_dir $f)
  if [ -f $M/model.safetensors.index.json ] || ls $M/*.safetensors > /dev/null 2>&1; then
    ours() {  # label, reps, tokens decoded, a row's time limit (s), then sluice bench options
      local label=$1 reps=$2 gen=$3 row_limit=$4; shift 4
      log "ours $f $label"
      timeout 540 "$F/sluice" bench --model $M --backends opencl --plugin-dir "$F" --gen $gen --reps $reps --row-timeout $row_limit \
        --json-out $R/ours_${f}_$label.json "$@" > $R/ours_${f}_$label.md 2> $R/ours_${f}_$label.log
      log "ours $f $label rc=$?"
    }
    # Row times measured 2026-11-29 (Gemma, H200): a 32768-token prompt ~45-80 s, decode 25-35 tokens/s
    # resident, ~1.3 streamed — hence one rep and shorter generations where rows are long.
    # Which rows (a call has 10 minutes): short, long, stream, or all (the default).
    rows=${3:-all}; want() { [ "$rows" = all ] || [ "$rows" = "$1" ]; }
    want short && ours resident 2 128 130 --kv-codecs f16,turbo3 --ctx 512
    want long && ours resident32k 1 64 250 --kv-codecs f16,turbo3 --ctx 32768
    # Streamed prefill re-reads the non-resident experts for every 512-token pass (~1.5 GB/s disk): depth 0 only.
    want stream && ours uring25 1 32 250 --kv-codecs f16 --ctx 512 --expert-stores "uring@25%"
  else
    log "ours $f: no model folder (see make_model_$f.txt)"
  fi
  log "ours $f done" ;;
peer)
  f=${2:?gemma or qwen}; M=$(model_dir $f); G=$(gguf $f)
  if [ "${3:-}" = depth ] && [ -x "$F/bench_depth" ] && ls $M/*.safetensors > /dev/null 2>&1; then  # ~5 minutes: asked for
    for codec in f16 turbo3; do
      timeout 150 "$F/bench_depth" --model $M --backend opencl --plugin-dir "$F" --kv-codec $codec --depths 0,32768 \
        --pp 512 --tg 32 --json > $R/depth_${f}_$codec.txt 2>&1
      log "bench_depth $f $codec rc=$?"
    done
  fi
  for i in $(seq 1 120); do grep -q BUILD_RC $W/build.log 2>/dev/null && break; sleep 3; done
  tail -n 1 $W/build.log | tee -a "$OUT/progress.txt"
  for ct in f16 turbo3; do
    timeout 230 $L/llama-bench -m $G -ngl 99 -fa 1 -ctk $ct -ctv $ct -p 512 -n 128 -d 0,32768 -r 2 -o json \
      > $R/peer_${f}_$ct.json 2> $R/peer_${f}_$ct.log
    log "peer $f $ct rc=$?"
  done
  log "peer $f done" ;;
tests)
  # The OpenCL tests that only a GPU decides (the zoo2 goldens, the per-layer caches' sliding windows,
  # the experts chosen on the device, the fused attention on layers of their own widths), from test
  # binaries in the bundle and .bundle_pack/zoo2.tar.xz,
  # run in the background while `start` makes the models: results in $OUT/tests_*.txt.
  ln -sfn "$PWD" /work/main 2>/dev/null; mkdir -p build /work/shared/models
  [ -e build/lib ] || ln -sfn "$F" build/lib
  [ -d /work/shared/models/zoo2 ] || tar -xJf .bundle_pack/zoo2.tar.xz -C /work/shared/models
  ( cd /work/main
    "$F/opencl_golden_models_test" --gtest_filter='*zoo2*' > "$OUT/tests_golden_zoo2.txt" 2>&1
    "$F/opencl_backend_ops_test" --gtest_filter='*KvLayers*:*MoeOps*' > "$OUT/tests_kv_layers_moe.txt" 2>&1
    # Layers of their own widths only: the whole test builds ~20 attention programs, 2-6 minutes cold on NVIDIA.
    "$F/opencl_fused_attention_test" --gtest_filter='OpenclPerLayer*' > "$OUT/tests_fused_per_layer.txt" 2>&1
    "$F/opencl_conformance_test" > "$OUT/tests_conformance.txt" 2>&1
    echo TESTS_DONE >> "$OUT/tests_conformance.txt" ) > /dev/null 2>&1 < /dev/null &
  log tests started ;;
table)
  python3 - $R <<'PY' | tee $R/model_families_peer.md
import json, os, sys
R = sys.argv[1]
def load(p):
    try: return json.load(open(os.path.join(R, p)))
    except Exception: return None
def fmt(x, d=1): return "—" if x is None else f"{x:.{d}f}"
def ratio(a, b): return "—" if a is None or not b else f"{a / b:.2f}×"
print("| model | cache | experts | depth | ours pp | peer pp512 | pp ours/peer | ours tg | peer tg128 | tg ours/peer |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for f, name in (("gemma", "gemma-4-26b-a4b"), ("qwen", "qwen3.5-35b-a3b")):
    peer = {}
    for ct in ("f16", "turbo3"):
        for t in load(f"peer_{f}_{ct}.json") or []:
            kind = "pp" if t.get("n_prompt") else "tg"
            peer[(ct, t.get("n_depth", 0), kind)] = t.get("avg_ts")
    for store in ("resident", "uring25"):
        rows = (load(f"ours_{f}_{store}.json") or {}).get("rows", [])
        if store == "resident": rows += (load(f"ours_{f}_resident32k.json") or {}).get("rows", [])
        for ct in ("f16", "turbo3"):
            for ctx, depth in ((512, 0), (32768, 32768)):
                r = next((r for r in rows if r.get("kv_codec") == ct and int(r.get("ctx", -1)) == ctx), None)
                if r is None and store == "uring25": continue
                pp, tg = (r or {}).get("prefill_tps"), (r or {}).get("decode_tps")
                if store == "uring25":  # the peer has no mode that streams experts under a budget
                    print(f"| {name} | {ct} | uring@25% | {depth} | {fmt(pp)} | (no such mode) | — | {fmt(tg, 2)} | — | — |")
                    continue
                ppeer, tpeer = peer.get((ct, depth, "pp")), peer.get((ct, depth, "tg"))
                print(f"| {name} | {ct} | resident | {depth} | {fmt(pp)} | {fmt(ppeer)} | "
                      f"{ratio(pp, ppeer)} | {fmt(tg, 2)} | {fmt(tpeer, 2)} | {ratio(tg, tpeer)} |")
print("\nOurs at depth 0: `sluice bench --ctx 512` (prefill 512, decode at depth 512); at 32768: `--ctx 32768` (prefill is "
      "the 32768-token prompt's mean; decode at depth 32768). The peer: llama-bench -fa 1 -ngl 99 -p 512 -n 128 -d 0,32768. "
      "bench_depth's pp512 at depth 32768 (like for like) is in depth_*.txt where it ran.")
PY
  log table done ;;
*) echo "usage: $0 start [gemma|qwen] | tests | ours gemma|qwen [short|long|stream] | peer gemma|qwen [depth] | swap | table" >&2; exit 2 ;;
esac
