#include "row_measure.h"

#include "hub/model_resolver.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "bench_stats.h"
#include "engine/runtime.h"
#include "hub/model_resolver.h"
#include "model/expert_layout.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace sluice::cli::bench {
namespace {

using Alloc = rapidjson::Document::AllocatorType;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

rapidjson::Value str(const std::string& s, Alloc& a) { return rapidjson::Value(s.c_str(), static_cast<rapidjson::SizeType>(s.size()), a); }

rapidjson::Value number_or_null(std::optional<double> v) {
  rapidjson::Value out;
  if (v) out.SetDouble(*v);
  return out;
}

// This process's peak resident set (VmHWM), in MiB; the row runs in its own process, so it is the row's.
std::optional<double> peak_rss_mb() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return std::nullopt;
}

// All experts' bytes, for a budget given as a share ("uring@25%").
Result<uint64_t> expert_total_bytes(const std::string& model_dir) {
  auto config = ModelConfig::load(model_dir);
  if (!config) return config.error();
  if (!config->moe.enabled()) return make_error("a share of the experts (@N%) needs a Mixture-of-Experts model");
  auto tensors = SafetensorsSet::open_dir(model_dir);
  if (!tensors) return tensors.error();
  auto layout = ExpertLayout::find(*config, *tensors);
  if (!layout) return layout.error();
  return layout->total_bytes();
}

// Random ids from a fixed seed: the same prompt for every row of a matrix. Decode feeds
// pseudo-random ids too rather than sampled ones: random-weight models repeat their argmax, and a
// repeated token is routed to the same experts every time, which would flatter an expert cache.
std::vector<int32_t> random_ids(std::size_t n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& t : ids) t = id(rng);
  return ids;
}

// The model's files read once through the page cache, for a row whose weights are used where they are
// mapped (any but a streaming expert store's): its first rep then starts as warm as the others — as a
// resident server is after its first requests, and as llama-bench's warm-up run leaves its mapped file.
// Otherwise a row right after one that streamed (or dropped the cache) times the disk in its first rep:
// a MoE model's warm-up touches only the experts it routes to.
void read_through_page_cache(const std::string& model_dir) {
  std::vector<char> buf(std::size_t{1} << 20);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(model_dir, ec)) {
    if (e.path().extension() != ".safetensors") continue;
    std::ifstream in(e.path(), std::ios::binary);
    while (in.read(buf.data(), static_cast<std::streamsize>(buf.size())) || in.gcount() > 0) {
    }
  }
}

}  // namespace

Result<rapidjson::Value> model_record(const std::string& model_dir, Alloc& a) {
  auto config = ModelConfig::load(model_dir);
  if (!config) return config.error();
  auto tensors = SafetensorsSet::open_dir(model_dir);
  if (!tensors) return tensors.error();
  uint64_t bytes = 0;
  for (const auto& [name, t] : tensors->tensors()) bytes += t.bytes;
  rapidjson::Value m(rapidjson::kObjectType);
  const std::string name = hub::model_name_of_folder(model_dir);  // org/name for a hub cache snapshot
  m.AddMember("name", str(name, a), a);
  m.AddMember("path", str(model_dir, a), a);
  m.AddMember("architecture", str(config->architecture, a), a);
  m.AddMember("layers", config->num_layers, a);
  m.AddMember("hidden_size", config->hidden_size, a);
  m.AddMember("heads", config->num_heads, a);
  m.AddMember("kv_heads", config->num_kv_heads, a);
  m.AddMember("head_dim", config->head_dim, a);
  m.AddMember("vocab_size", config->vocab_size, a);
  m.AddMember("experts", config->moe.n_experts, a);
  m.AddMember("experts_per_token", config->moe.top_k, a);
  m.AddMember("quantization_bits", config->quantization.bits, a);
  m.AddMember("weight_mb", static_cast<double>(bytes) / (1 << 20), a);
  return m;
}

Result<rapidjson::Value> measure_row(const RowSpec& spec, Alloc& a, const Progress& progress) {
  EngineOptions o = spec.engine;
  int budget_mb = spec.expert_budget_mb;
  if (spec.expert_budget_pct > 0) {
    auto total = expert_total_bytes(o.model_dir);
    if (!total) return make_error(spec.expert_label + ": " + total.message());
    budget_mb = static_cast<int>(std::max<uint64_t>(1, *total * static_cast<uint64_t>(spec.expert_budget_pct) / 100 >> 20));
  }
  o.expert_cache_mb = budget_mb;
  // Room for the prompt, the decoded tokens and the warm-up; ctx 0 still needs one prompt token.
  const int prompt_len = std::max(spec.ctx, 1);
  o.ctx_size = prompt_len + spec.gen + 16;
  auto opened = Runtime::open(o, static_cast<uint32_t>(o.ctx_size));
  if (!opened) return opened.error();
  Runtime& rt = **opened;
  const int vocab = rt.config().vocab_size;
  const auto prompt = random_ids(static_cast<std::size_t>(prompt_len), vocab, 42);
  const auto decode_ids = random_ids(static_cast<std::size_t>(spec.gen), vocab, 4242);
  std::vector<float> logits;
  ExpertStoreHandle* store = rt.expert_store();

  // Warm-up, untimed: device programs built, buffers grown to the prompt's size, caches touched.
  if (o.expert_store == "resident") read_through_page_cache(o.model_dir);
  {
    SequenceState seq;
    const std::size_t n = std::min<std::size_t>(prompt.size(), static_cast<std::size_t>(std::max(1, o.prefill_size)));
    if (auto s = rt.run(seq, std::span<const int32_t>(prompt.data(), n), false, logits); !s) return make_error("warm-up: " + s.message());
    if (auto s = rt.run(seq, std::span<const int32_t>(decode_ids.data(), std::min<std::size_t>(1, decode_ids.size())), false, logits);
        !s)
      return make_error("warm-up: " + s.message());
    rt.release(seq);
  }

  std::vector<double> ttft_ms, prefill_tps, decode_tps;
  uint64_t store_bytes = 0, store_hits = 0, store_misses = 0;
  for (int rep = 0; rep < spec.reps; ++rep) {
    SequenceState seq;
    auto t0 = Clock::now();
    if (auto s = rt.run(seq, prompt, false, logits); !s) return make_error("prefill: " + s.message());
    const double prefill_s = seconds_since(t0);
    ttft_ms.push_back(prefill_s * 1000.0);
    if (spec.ctx > 0) prefill_tps.push_back(spec.ctx / prefill_s);
    const auto before = store ? store->stats() : sl_expertstore_stats{};
    t0 = Clock::now();
    for (int i = 0; i < spec.gen; ++i)
      if (auto s = rt.run(seq, std::span<const int32_t>(&decode_ids[static_cast<std::size_t>(i)], 1), false, logits); !s)
        return make_error("decode: " + s.message());
    const double decode_s = seconds_since(t0);
    if (spec.gen > 0) decode_tps.push_back(spec.gen / decode_s);
    if (store) {
      const auto after = store->stats();
      store_bytes += after.bytes_read - before.bytes_read;
      store_hits += after.hits - before.hits;
      store_misses += after.misses - before.misses;
    }
    rt.release(seq);
    if (progress)
      progress("rep " + std::to_string(rep + 1) + "/" + std::to_string(spec.reps) + ": ttft " + std::to_string(static_cast<int>(ttft_ms.back())) +
               " ms, decode " + (decode_tps.empty() ? std::string("-") : std::to_string(decode_tps.back()).substr(0, 6)) + " tokens/s");
  }

  rapidjson::Value row(rapidjson::kObjectType);
  const auto& dev = rt.backend().device();
  row.AddMember("backend", str(o.backend, a), a);
  row.AddMember("backend_options", str(o.backend_options, a), a);
  row.AddMember("device", str(dev.name, a), a);
  row.AddMember("backend_description", str(rt.backend().description(), a), a);
  row.AddMember("gpu_layers", str(spec.gpu_layers_label, a), a);
  // Which backend ran which layers ("opencl: … (layers 0-7) + cpu: … (layers 8-31)" when split).
  row.AddMember("placement", str(rt.placement(), a), a);
  row.AddMember("threads", o.threads, a);
  row.AddMember("kv_codec", str(rt.kv().codec_description(), a), a);
  row.AddMember("expert_store", str(spec.expert_label, a), a);
  row.AddMember("expert_budget_mb", number_or_null(store && budget_mb > 0 ? std::optional<double>(budget_mb) : std::nullopt), a);
  row.AddMember("ctx", spec.ctx, a);
  row.AddMember("gen", spec.gen, a);
  row.AddMember("reps", spec.reps, a);
  auto add_spread = [&](const char* name, const std::vector<double>& v) {
    const auto s = spread(v);
    const bool have = !v.empty();
    row.AddMember(rapidjson::StringRef(name), number_or_null(have ? std::optional(s.median) : std::nullopt), a);
    row.AddMember(str(std::string(name) + "_min", a), number_or_null(have ? std::optional(s.min) : std::nullopt), a);
    row.AddMember(str(std::string(name) + "_max", a), number_or_null(have ? std::optional(s.max) : std::nullopt), a);
  };
  add_spread("ttft_ms", ttft_ms);
  add_spread("prefill_tps", prefill_tps);
  add_spread("decode_tps", decode_tps);
  row.AddMember("peak_rss_mb", number_or_null(peak_rss_mb()), a);
  // What the model put in device memory: the weights when the device cannot read host memory (they
  // are copied; a device that can uses the mapped files in place) and the KV cache, which is always
  // allocated on the device. Activation buffers are not counted. The CPU backend has no device
  // memory apart from the host's (see peak_rss_mb): null. So is a model split between backends
  // (--gpu-layers N), whose share of weights and KV cache on the device the runtime does not report.
  std::optional<double> device_mb;
  if (rt.backend().name() != "cpu" && o.gpu_layers.empty()) {
    const bool unified = (dev.caps & SL_CAP_UNIFIED) != 0;
    const uint64_t weights = unified ? 0 : rt.model().weight_bytes();
    device_mb = static_cast<double>(weights + rt.kv().capacity_bytes() + rt.kv().recent_bytes()) / (1 << 20);
  }
  row.AddMember("device_mem_mb", number_or_null(device_mb), a);
  // The KV cache one sequence holds at the end of a rep: every prompt and decoded position.
  const double kv_per_token = rt.kv().bytes_per_token();
  row.AddMember("kv_bytes", static_cast<uint64_t>(kv_per_token * (prompt_len + spec.gen)), a);
  row.AddMember("kv_bytes_per_token", kv_per_token, a);
  // The newest keys kept exact beside a compressing codec's rows (--kv-recent), and that pool's bytes.
  row.AddMember("kv_recent", rt.kv().recent_window(), a);
  row.AddMember("kv_recent_bytes", rt.kv().recent_bytes(), a);
  const uint64_t decoded = static_cast<uint64_t>(spec.gen) * static_cast<uint64_t>(spec.reps);
  std::optional<double> per_token, hit_rate;
  if (store && decoded > 0) {
    per_token = static_cast<double>(store_bytes) / static_cast<double>(decoded);
    if (store_hits + store_misses > 0) hit_rate = static_cast<double>(store_hits) / static_cast<double>(store_hits + store_misses);
  }
  row.AddMember("expert_bytes_read_per_token", number_or_null(per_token), a);
  row.AddMember("hit_rate", number_or_null(hit_rate), a);
  row.AddMember("weight_mb", static_cast<double>(rt.model().weight_bytes()) / (1 << 20), a);
  // What a decode step reads from memory on average over the decoded positions: the weights (routed
  // experts at the share a token picks) and the cache up to the position. Its rate at the measured
  // decode speed is set beside the machine's measured bandwidth (matrix_runner).
  const double kv_read = kv_per_token * (static_cast<double>(prompt_len) + spec.gen / 2.0);
  const double decode_bytes = static_cast<double>(rt.model().decode_bytes_per_token()) + kv_read;
  row.AddMember("decode_bytes_per_token", decode_bytes, a);
  std::optional<double> decode_gbs;
  if (!decode_tps.empty()) decode_gbs = decode_bytes * spread(decode_tps).median / 1e9;
  row.AddMember("decode_gbs", number_or_null(decode_gbs), a);
  return row;
}

}  // namespace sluice::cli::bench
