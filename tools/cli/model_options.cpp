#include "model_options.h"

#include <iostream>

#include "engine/layer_split.h"

namespace sluice::cli {

namespace {

// Malformed values are usage errors (exit 2), reported while parsing.
void check_gpu_layers(const std::string& value) {
  if (auto g = GpuLayers::parse(value); !g) throw po::error(g.message());
}
void check_decode_ahead(const std::string& value) {
  if (value != "auto" && value != "on" && value != "off") throw po::error("--decode-ahead must be auto, on or off");
}
void check_devices(const std::string& value) {
  if (auto d = parse_devices(value); !d) throw po::error(d.message());
}

}  // namespace

void add_model_options(po::options_description& desc, EngineOptions& o) {
  desc.add_options()
      ("model", po::value(&o.model_dir)->required(), "model folder (Hugging Face layout) or hub id org/name[@revision] (cached or downloaded)")
      ("backend", po::value(&o.backend)->default_value("auto"), "auto | cpu | opencl[:P:D] | path/to/plugin.so")
      ("kv-codec", po::value(&o.kv_codec)->default_value("f16"), "KV cache codec: f32 | f16 | plugin name | k=A,v=B")
      ("kv-recent", po::value(&o.kv_recent)->default_value(-1),
       "newest keys attended exactly (f16 copies) with a compressing codec: tokens, 0 off, -1 auto (16)")
      ("gpu-layers", po::value(&o.gpu_layers)->notifier(check_gpu_layers),
       "the first N layers on the GPU/OpenCL backend (--backend or --devices), the rest on the CPU; auto: as many as fit")
      ("devices", po::value(&o.devices)->notifier(check_devices),
       "several offload devices, e.g. opencl:0:0,opencl:0:1: layers split evenly between them")
      ("backend-options", po::value(&o.backend_options),
       "options of the --backend/--devices backend, e.g. OpenCL's \"tune.att_wg=128 tuning=FILE\" (docs/GUIDE.md)")
      ("plugin-dir", po::value(&o.plugin_dir), "where to look for sluice-*.so plugins (default: next to the binary)")
      ("threads", po::value(&o.threads)->default_value(0), "CPU threads (0 = all cores)")
      ("ctx-size", po::value(&o.ctx_size)->default_value(0), "context size in tokens (0 = the model's, at most 8192)")
      ("prefill-size", po::value(&o.prefill_size)->default_value(512), "prompt tokens per forward pass")
      ("decode-ahead", po::value(&o.decode_ahead)->default_value("auto")->notifier(check_decode_ahead),
       "greedy requests decode a token ahead, the choice kept on the device: auto (where the backend queues its ops) | on | off")
      ("expert-store", po::value(&o.expert_store)->default_value("resident"),
       "where MoE experts live: resident | uring[:direct=0,uring=0,qd=N] | plugin name")
      ("expert-cache-mb", po::value(&o.expert_cache_mb)->default_value(0), "expert cache budget in MiB for a streaming store (0 = its default)")
      ("draft", po::value(&o.draft), "speculative decoding with guesses from the sequence itself: ngram (prompt lookup)")
      ("draft-model", po::value(&o.draft_model), "speculative decoding with guesses from a small model with the same tokenizer (folder)")
      ("num-draft-tokens", po::value(&o.num_draft_tokens)->default_value(o.num_draft_tokens),
       "the most guesses one pass verifies (the draft length adapts below it to the acceptance rate)")
      ("spec-max-batch", po::value(&o.spec_max_batch)->default_value(o.spec_max_batch),
       "speculate only while at most this many sequences decode together");
}

int parse_or_exit(const char* command, const std::vector<std::string>& args, const po::options_description& desc,
                  po::variables_map& vm, const char* synopsis) {
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: sluice " << command << " " << synopsis << "\n\n" << desc << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "sluice " << command << ": " << e.what() << "\nusage: sluice " << command << " " << synopsis
              << "\n(--help for all options)\n";
    return 2;
  }
  return -1;
}

}  // namespace sluice::cli
