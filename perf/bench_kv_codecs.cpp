// bench_kv_codecs: the fused attention hooks of each KV codec in isolation — nanoseconds per cached
// key for score_keys and per cached value for accumulate_values, over a history of --rows rows in
// pages of 16 (as the CPU backend calls them), one thread. Also decode (the prefill path) and encode
// (every new token) per row.
//
//   bench_kv_codecs [--plugin-dir build/lib] [--head-dim 64] [--rows 8192] [--codecs f16,q8,q4,turbo4,turbo3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "plugin/builtin_codecs.h"
#include "plugin/plugin_registry.h"

using namespace sluice;

namespace {

template <class F>
double best_ns(F&& f, int reps = 7) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string plugin_dir = "build/lib", codecs = "f16,q8,q4,turbo4,turbo3,turbo2,turbo-prod";
  uint32_t head_dim = 64, rows = 8192;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--plugin-dir") plugin_dir = next();
    else if (a == "--head-dim") head_dim = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--rows") rows = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--codecs") codecs = next();
    else {
      std::fprintf(stderr, "bench_kv_codecs: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  PluginRegistry registry;
  registry.scan(plugin_dir);
  std::mt19937 rng(1);
  std::normal_distribution<float> g;
  std::vector<float> x(static_cast<std::size_t>(rows) * head_dim), q(head_dim), w(rows), out(head_dim);
  for (auto& v : x) v = g(rng);
  for (auto& v : q) v = g(rng);
  for (auto& v : w) v = std::fabs(g(rng)) / rows;

  std::printf("| codec | bits/value | bytes/row | score_keys ns/key | accumulate_values ns/value | decode ns/row | encode ns/row |\n"
              "| --- | --- | --- | --- | --- | --- | --- |\n");
  std::stringstream names(codecs);
  for (std::string name; std::getline(names, name, ',');) {
    const sl_kvcodec_api* api = name == "f16" ? builtin_f16_codec() : name == "f32" ? builtin_f32_codec() : nullptr;
    if (!api) {
      const auto* rec = registry.find(SL_PLUGIN_KVCODEC, name);
      if (!rec) {
        std::fprintf(stderr, "bench_kv_codecs: no codec %s in %s\n", name.c_str(), plugin_dir.c_str());
        continue;
      }
      api = static_cast<const sl_kvcodec_api*>(rec->descriptor->api);
    }
    sl_kvcodec *kc = nullptr, *vc = nullptr;
    sl_error err{};
    if (api->create(head_dim, SL_KV_KEYS, "", &kc, &err) != SL_OK || api->create(head_dim, SL_KV_VALUES, "", &vc, &err) != SL_OK) {
      std::fprintf(stderr, "bench_kv_codecs: %s: %s\n", name.c_str(), err.message);
      continue;
    }
    sl_kv_format f{};
    f.struct_size = sizeof(f);
    api->get_format(kc, &f);
    std::vector<std::byte> krows(static_cast<std::size_t>(rows) * f.row_bytes), vrows(krows.size());
    api->encode(kc, x.data(), rows, krows.data(), &err);
    api->encode(vc, x.data(), rows, vrows.data(), &err);
    std::vector<std::byte> state(api->query_state_bytes(kc));
    std::vector<float> scores(rows), acc(std::max(f.domain_dim, head_dim)), decoded(static_cast<std::size_t>(16) * head_dim);
    const uint32_t page = 16;
    const double score_ns = best_ns([&] {
      api->prepare_query(kc, q.data(), state.data());
      for (uint32_t at = 0; at < rows; at += page)
        api->score_keys(kc, state.data(), krows.data() + static_cast<std::size_t>(at) * f.row_bytes, f.row_bytes, page, scores.data() + at);
    });
    const double acc_ns = best_ns([&] {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (uint32_t at = 0; at < rows; at += page)
        api->accumulate_values(vc, vrows.data() + static_cast<std::size_t>(at) * f.row_bytes, f.row_bytes, page, w.data() + at, acc.data());
      api->finish_values(vc, acc.data(), out.data());
    });
    const double decode_ns = best_ns([&] {
      for (uint32_t at = 0; at < rows; at += page)
        api->decode(vc, vrows.data() + static_cast<std::size_t>(at) * f.row_bytes, page, decoded.data(), &err);
    });
    const uint32_t enc_rows = std::min<uint32_t>(rows, 4096);
    const double encode_ns = best_ns([&] { api->encode(kc, x.data(), enc_rows, krows.data(), &err); }, 3);
    std::printf("| %s | %.3g | %u | %.2f | %.2f | %.2f | %.0f |\n", name.c_str(), f.bits_per_value, f.row_bytes, score_ns / rows,
                acc_ns / rows, decode_ns / rows, encode_ns / enc_rows);
    api->destroy(kc);
    api->destroy(vc);
  }
  return 0;
}
