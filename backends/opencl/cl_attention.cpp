// The paged KV cache and attention over it.
//
// Layout per layer (as the CPU backend's): n_pages pages; a page holds page_tokens positions: the K
// rows of every KV head ([head][slot]), then the V rows, in the codecs' formats.
// When both codecs give OpenCL source, the pages live on the device and kv_write/attention are
// kernels built with that source (kernels_cl/attention.cl; kv_write_rope also runs the deferred rope
// of q and k right before a kv_write, in its launch). Otherwise the host keeps the layer's
// pages and runs the codec's encode/decode and the attention itself: slow, but correct for any codec.
//
// A launch costs 5-7 µs on the H100 even when it does almost nothing, so a decode kv_write (every
// token of another sequence) waits too: where the attention of its cache and layer right after
// takes attention_short, attention_short_join runs the kv_write (with the rope pair it took) in the
// attention's launch (kernels_cl/attention_short.cl); anything else runs it first, as it was asked.
// SLUICE_OPENCL_ATT_JOIN=0, or the backend option "no-attention-join", keeps the two launches.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "cl_backend.h"
#include "util/recent_window.h"
#include "util/vec.h"  // f16 conversions of the recent window on the host path

namespace sluice::ocl {
namespace {

// The attention kernels' work-group: a tile of WG keys is scored in parallel (one key a work-item in
// the fused kernel; teams of ATT_TEAM work-items a key in the generic one), one key's softmax weight a work-item.
// SLUICE_OPENCL_ATT_WG (64, 128 or 256) overrides it.
uint32_t attention_wg() {
  static const long knob = env_knob("SLUICE_OPENCL_ATT_WG", [](long v) { return v == 64 || v == 128 || v == 256; });
  return knob ? static_cast<uint32_t>(knob) : 64u;
}

// SLUICE_OPENCL_ATT_VU (1..64) overrides how many keys' values a work-item loads before using them
// (ATT_VU in kernels_cl/attention.cl).
std::string value_unroll_option() {
  static const long knob = env_knob("SLUICE_OPENCL_ATT_VU", [](long v) { return v >= 1 && v <= 64; });
  return knob ? " -DATT_VU=" + std::to_string(knob) : "";
}

// The generic kernel's key scoring (kernels_cl/attention.cl): SLUICE_OPENCL_ATT_TEAM (8, 16, 32)
// overrides how many work-items read a key row together (ATT_TEAM), SLUICE_OPENCL_ATT_KPT (1, 2, 4,
// 8) how many keys a team loads before summing (ATT_KPT); SLUICE_OPENCL_ATT_SHFL_LOCAL=1 runs the
// shuffle path's reduction through local memory, to check it on devices without PTX.
std::string key_scoring_options() {
  static const long team = env_knob("SLUICE_OPENCL_ATT_TEAM", [](long v) { return v == 8 || v == 16 || v == 32; });
  static const long kpt = env_knob("SLUICE_OPENCL_ATT_KPT", [](long v) { return v == 1 || v == 2 || v == 4 || v == 8; });
  static const long shfl_local = env_knob("SLUICE_OPENCL_ATT_SHFL_LOCAL", [](long v) { return v == 1; });
  std::string options;
  if (team) options += " -DATT_TEAM=" + std::to_string(team);
  if (kpt) options += " -DATT_KPT=" + std::to_string(kpt);
  if (shfl_local) options += " -DATT_SHFL_LOCAL=1";
  return options;
}

// attention_short (kernels_cl/attention_short.cl) serves queries of at most this many keys where the
// program has it; longer ones go to the generic kernel. On the H100 at depth 0 (≤ 80 keys) it took
// 13.0 µs a launch against the generic kernel's 18.1 (profiled); at depth 8192, with key splits, it
// was no faster (perf/NOTES.md) — 512 keys is where the generic kernel starts to split.
// SLUICE_OPENCL_ATT_SHORT=N sets N (0: never), and a backend created with the option
// "generic-attention" never uses it (the tests compare the two).
int32_t short_passes_max_keys(const sl_backend* be) {
  static const int32_t limit = [] {
    const char* e = std::getenv("SLUICE_OPENCL_ATT_SHORT");
    return e && *e ? static_cast<int32_t>(std::clamp<long>(std::strtol(e, nullptr, 10), 0, INT32_MAX)) : 512;
  }();
  return be->options.find("generic-attention") != std::string::npos ? 0 : limit;
}

// Whether a decode kv_write may wait for its attention (above; the tests compare the two paths).
bool attention_join_on(const sl_backend* be) {
  static const bool off = [] {
    const char* e = std::getenv("SLUICE_OPENCL_ATT_JOIN");
    return e && std::strcmp(e, "0") == 0;
  }();
  return !off && be->options.find("no-attention-join") == std::string::npos && short_passes_max_keys(be) > 0;
}

// Every token of the batch of another sequence (decode): no token reads a row another one writes.
bool one_token_per_sequence(const sl_backend* be) {
  std::vector<int32_t> slots = be->seq_slots;
  std::sort(slots.begin(), slots.end());
  return !slots.empty() && std::adjacent_find(slots.begin(), slots.end()) == slots.end();
}

// The work-group of kv_write, attention_fused_queries and attention_merge: a turbo key tries 16
// rotations, each with its own transform and search, so a row is encoded by up to 256 work-items (16
// a rotation) where the device allows; a query is rotated 16 ways for every head of a work-group, by
// as many; a merge sums its splits in several lanes.
uint32_t wide_group_size(const sl_backend* be) {
  uint32_t wg = 256;
  while (wg > attention_wg() && wg > be->caps.max_wg) wg /= 2;
  return wg;
}

const char* codec_source(const sl_kvcodec_api* api, const sl_kvcodec* codec) {
  if (!api || api->struct_size < offsetof(sl_kvcodec_api, opencl_source) + sizeof(void*) || !api->opencl_source) return nullptr;
  return api->opencl_source(codec);
}

// The fused device functions (docs/PLUGINS.md) a codec's source may define, by role.
bool source_has(const char* source, std::initializer_list<const char*> names) {
  if (!source) return false;
  for (const char* n : names)
    if (!std::strstr(source, n)) return false;
  return true;
}
bool has_fused_keys(const char* source) { return source_has(source, {"SL_KV_FN(fused_prepare_query)", "SL_KV_FN(fused_score)"}); }
bool has_fused_values(const char* source) {
  return source_has(source, {"SL_KV_FN(fused_prepare_values)", "SL_KV_FN(fused_value)", "SL_KV_FN(fused_finish)"});
}
bool has_group_encode(const char* source) { return source_has(source, {"SL_KV_FN(encode_row_group)"}); }

// Local floats of one head's K query area in attention_fused (docs/PLUGINS.md): the domain, one
// padding float per head_dim slot, 64 for the codec's tables.
uint64_t k_query_area(const sl_kv_cache* c) {
  return c->k_fused ? c->k_format.domain_dim + c->k_format.domain_dim / c->layout.head_dim + 64 : 1;
}

bool keeps_recent(const sl_backend* be, const sl_kv_cache* c) { return c->layout.recent_window > 0 && !be->recent_table.empty(); }

sl_status check_pages(const sl_backend* be, const sl_kv_cache* c, sl_error* err) {
  for (std::size_t t = 0; t < be->positions.size(); ++t) {
    const uint32_t last_page = static_cast<uint32_t>(be->positions[t]) / c->layout.page_tokens;
    if (last_page >= be->max_pages)
      return set_error(err, SL_ERR_INVALID_ARGUMENT, "position " + std::to_string(be->positions[t]) + " beyond the page table");
    const std::size_t row = static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages;
    const int32_t* table = be->page_table.data() + row;
    for (uint32_t p = 0; p <= last_page; ++p)
      if (table[p] < 0 || static_cast<uint32_t>(table[p]) >= c->layout.n_pages)
        return set_error(err, SL_ERR_INVALID_ARGUMENT, "page table entry " + std::to_string(table[p]) + " out of range");
    if (!keeps_recent(be, c)) continue;
    for (uint32_t p = 0; p <= last_page; ++p)
      if (be->recent_table[row + p] >= static_cast<int32_t>(c->layout.n_recent_pages))
        return set_error(err, SL_ERR_INVALID_ARGUMENT, "recent table entry " + std::to_string(be->recent_table[row + p]) + " out of range");
  }
  return SL_OK;
}

// The V codec's accumulator slots in the fused kernel (domain_dim / head_dim; 1 = one domain).
uint32_t v_slots(const sl_kv_cache* c) { return c->v_fused ? c->v_format.domain_dim / c->layout.head_dim : 1; }

// Floats of local memory the fused kernel's `acc` argument takes per head: the V codec's slots,
// except with one slot beside fused keys, where the accumulators live in registers and the final
// rotation back reuses the query area (kernels_cl/attention_fused.cl, V_IN_REGISTERS).
uint64_t v_acc_area(const sl_kv_cache* c) {
  if (!c->v_fused || (c->k_fused && v_slots(c) == 1)) return 1;
  return c->v_format.domain_dim;
}

// Query heads per fused work-group: the largest divisor of the group whose local memory fits
// (per head: the query area, the value accumulators, the original query, p and red; per group: the
// value rows' offsets and the V codec's tables).
uint32_t fused_heads_per_group(const sl_backend* be, const sl_kv_cache* c, uint32_t group) {
  const uint64_t k_area = k_query_area(c), v_area = v_acc_area(c);
  const uint64_t budget = be->caps.local_mem ? be->caps.local_mem * 7 / 8 : 32768;
  for (uint32_t hpw = group; hpw >= 1; --hpw) {
    if (group % hpw) continue;
    const uint64_t wg = attention_wg();
    const uint64_t bytes = 4 * (hpw * (k_area + v_area + c->layout.head_dim + 2 * wg) + 2 * wg + 64);
    if (bytes <= budget) return hpw;
  }
  return 0;
}

sl_kv_cache::Kernels& cache_kernels(sl_backend* be, sl_kv_cache* c, uint32_t group) {
  auto it = c->kernels.find(group);
  if (it != c->kernels.end()) return it->second;
  const auto& L = c->layout;
  const char* k_source = codec_source(L.k_api, L.k_codec);
  const char* v_source = codec_source(L.v_api, L.v_codec);
  std::string source = kernel_source("common") + kernel_source("warp");  // warp: the output's 15-bit form (att_write)
  source += "\n#define SL_KV_FN(name) sl_k_##name\n";
  source += k_source;
  source += "\n#undef SL_KV_FN\n#define SL_KV_FN(name) sl_v_##name\n";
  source += v_source;
  source += "\n#undef SL_KV_FN\n";
  source += kernel_source("rope");  // kv_write_rope's rotation, the rope kernel's own
  source += kernel_source("attention");
  source += kernel_source("attention_fused");
  source += kernel_source("attention_short");
  const uint32_t hpw = (c->k_fused || c->v_fused) ? fused_heads_per_group(be, c, group) : 0;
  const uint32_t wide_wg = wide_group_size(be);
  const std::string options = "-cl-std=CL1.2 -DHEAD_DIM=" + std::to_string(L.head_dim) + " -DGROUP=" + std::to_string(group) +
                              " -DWG=" + std::to_string(attention_wg()) + " -DK_FUSED=" + std::to_string(hpw && c->k_fused) +
                              " -DV_FUSED=" + std::to_string(hpw && c->v_fused) + " -DHPW=" + std::to_string(std::max(hpw, 1u)) +
                              " -DV_SLOTS=" + std::to_string(v_slots(c)) +
                              " -DK_ENCODE_GROUP=" + std::to_string(has_group_encode(k_source)) +
                              " -DV_ENCODE_GROUP=" + std::to_string(has_group_encode(v_source)) +
                              " -DWIDE_WG=" + std::to_string(wide_wg) + value_unroll_option() +
                              " -DK_HEADS=" + std::to_string(source_has(k_source, {"SL_KV_FN(fused_prepare_queries)", "SL_KV_FN(fused_score_heads)"})) +
                              " -DV_FINISH_HEADS=" + std::to_string(source_has(v_source, {"SL_KV_FN(fused_finish_heads)"})) +
                              " -DV_VALUES8=" + std::to_string(source_has(v_source, {"SL_KV_FN(fused_values8)"})) +
                              key_scoring_options() + nv_register_cap(be, "SLUICE_OPENCL_MAXRREG_ATT");
  // On NVIDIA the key scoring's teams sum with warp shuffles (inline PTX); a program that fails to
  // build with them is reported once and built with the local-memory sums instead.
  cl::Program program;
  bool built = false;
  if (be->use_ptx) {
    try {
      program = build_program(be, source, options + " -DSLUICE_PTX_SHFL");
      built = true;
    } catch (const std::exception& e) {
      static bool reported = false;
      if (!reported) std::fprintf(stderr, "opencl: attention without warp shuffles: %s\n", e.what());
      reported = true;
    }
  }
  if (!built) program = build_program(be, source, options);
  sl_kv_cache::Kernels k{cl::Kernel(program, "kv_write"),
                         cl::Kernel(program, "attention"),
                         cl::Kernel(program, "attention_merge"),
                         hpw ? cl::Kernel(program, "attention_fused") : cl::Kernel(),
                         hpw && c->k_fused ? cl::Kernel(program, "attention_fused_queries") : cl::Kernel(),
                         hpw,
                         wide_wg,
                         cl::Kernel(program, "kv_gather_f16"),
                         cl::Kernel(program, "kv_write_rope"),
                         built,  // ptx: set above only by the build with SLUICE_PTX_SHFL
                         // attention_short exists where the program has warp exchanges and the shape fits (attention_short.cl).
                         program_has_kernel(program, "attention_short") ? cl::Kernel(program, "attention_short") : cl::Kernel(),
                         // attention_short_join encodes in a branch of one key split, where a barrier of the
                         // codec's encoder would be one under a work-group-uniform if: PoCL miscompiles those.
                         program_has_kernel(program, "attention_short_join") && !source_has(k_source, {"barrier("}) &&
                                 !source_has(v_source, {"barrier("})
                             ? cl::Kernel(program, "attention_short_join")
                             : cl::Kernel()};
  return c->kernels.emplace(group, std::move(k)).first->second;
}

std::byte* host_k_row(sl_kv_cache* c, uint32_t layer, uint32_t page, uint32_t head, uint32_t slot) {
  return c->host_layers[layer].data() + page * c->page_bytes +
         (static_cast<uint64_t>(head) * c->layout.page_tokens + slot) * c->k_format.row_bytes;
}
uint16_t* host_recent_row(sl_kv_cache* c, uint32_t layer, int32_t rpage, int kv, uint32_t head, uint32_t slot) {
  const auto& L = c->layout;
  return c->host_recent[layer].data() +
         (((static_cast<std::size_t>(rpage) * 2 + static_cast<std::size_t>(kv)) * L.n_kv_heads + head) * L.page_tokens + slot) * L.head_dim;
}

// The first key a query at `pos` reads exactly (as att_exact_from in kernels_cl/attention.cl).
int32_t exact_from(const sl_backend* be, const sl_kv_cache* c, int32_t seq, int32_t pos, int32_t lo) {
  if (!keeps_recent(be, c)) return pos + 1;
  return recent_exact_from(be->recent_table.data() + static_cast<std::size_t>(seq) * be->max_pages, c->layout.recent_window,
                           c->layout.page_tokens, pos, lo);
}

std::byte* host_v_row(sl_kv_cache* c, uint32_t layer, uint32_t page, uint32_t head, uint32_t slot) {
  const auto& L = c->layout;
  return c->host_layers[layer].data() + page * c->page_bytes +
         static_cast<uint64_t>(L.n_kv_heads) * L.page_tokens * c->k_format.row_bytes +
         (static_cast<uint64_t>(head) * L.page_tokens + slot) * c->v_format.row_bytes;
}

cl::Buffer& single(const sl_buffer* b) {
  if (b->chunks.size() != 1) throw std::runtime_error("activation buffer larger than one device allocation");
  return const_cast<cl::Buffer&>(b->chunks[0]);
}

// Decode-then-attend on the host, for codecs without OpenCL source.
sl_status host_attention(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const sl_attention_params* p,
                         sl_buffer* out, sl_error* err) {
  const auto& L = c->layout;
  const uint32_t D = p->head_dim, group = p->n_heads / p->n_kv_heads;
  const std::size_t n_tokens = be->positions.size(), row = std::size_t(p->n_heads) * D;
  std::vector<float> qh(n_tokens * row), oh(n_tokens * row), sinks;
  be->queue.enqueueReadBuffer(single(q), CL_TRUE, 0, qh.size() * 4, qh.data());
  if (p->sinks) {
    sinks.resize(p->n_heads);
    be->queue.enqueueReadBuffer(single(p->sinks), CL_TRUE, 0, sinks.size() * 4, sinks.data());
  }
  std::vector<float> keys, values, scores;
  for (std::size_t t = 0; t < n_tokens; ++t) {
    const int32_t pos = be->positions[t];
    const int32_t lo = p->window ? std::max<int32_t>(0, pos - static_cast<int32_t>(p->window) + 1) : 0;
    const std::size_t n = static_cast<std::size_t>(pos - lo + 1);
    const int32_t* table = be->page_table.data() + static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages;
    for (uint32_t kvh = 0; kvh < L.n_kv_heads; ++kvh) {
      keys.resize(n * D);
      values.resize(n * D);
      for (int32_t at = lo; at <= pos;) {
        const uint32_t page = static_cast<uint32_t>(table[at / L.page_tokens]), slot = at % L.page_tokens;
        const uint32_t run = std::min<uint32_t>(L.page_tokens - slot, static_cast<uint32_t>(pos - at + 1));
        float* kd = keys.data() + static_cast<std::size_t>(at - lo) * D;
        float* vd = values.data() + static_cast<std::size_t>(at - lo) * D;
        if (auto s = L.k_api->decode(L.k_codec, host_k_row(c, layer, page, kvh, slot), run, kd, err); s != SL_OK) return s;
        if (auto s = L.v_api->decode(L.v_codec, host_v_row(c, layer, page, kvh, slot), run, vd, err); s != SL_OK) return s;
        at += static_cast<int32_t>(run);
      }
      // The recent window's keys and values: the exact rows instead of the decoded ones.
      const int32_t exact = exact_from(be, c, be->seq_slots[t], pos, lo);
      for (int32_t j = exact; j <= pos; ++j) {
        const int32_t rpage = be->recent_table[static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages + j / L.page_tokens];
        const uint16_t* kx = host_recent_row(c, layer, rpage, 0, kvh, j % L.page_tokens);
        const uint16_t* vx = host_recent_row(c, layer, rpage, 1, kvh, j % L.page_tokens);
        for (uint32_t d = 0; d < D; ++d) {
          keys[static_cast<std::size_t>(j - lo) * D + d] = sluice::cpu::f16_to_f32(kx[d]);
          values[static_cast<std::size_t>(j - lo) * D + d] = sluice::cpu::f16_to_f32(vx[d]);
        }
      }
      for (uint32_t g = 0; g < group; ++g) {
        const uint32_t h = kvh * group + g;
        const float* qv = qh.data() + t * row + std::size_t(h) * D;
        scores.resize(n);
        float m = sinks.empty() ? -INFINITY : sinks[h];
        for (std::size_t j = 0; j < n; ++j) {
          float s = 0.0f;
          for (uint32_t d = 0; d < D; ++d) s += qv[d] * keys[j * D + d];
          s *= p->scale;
          if (p->softcap > 0) s = std::tanh(s / p->softcap) * p->softcap;
          scores[j] = s;
          m = std::max(m, s);
        }
        float sum = sinks.empty() ? 0.0f : std::exp(sinks[h] - m);
        for (auto& s : scores) sum += (s = std::exp(s - m));
        float* o = oh.data() + t * row + std::size_t(h) * D;
        std::fill(o, o + D, 0.0f);
        for (std::size_t j = 0; j < n; ++j) {
          const float w = scores[j] / sum;
          for (uint32_t d = 0; d < D; ++d) o[d] += w * values[j * D + d];
        }
      }
    }
  }
  be->queue.enqueueWriteBuffer(single(out), CL_TRUE, 0, oh.size() * 4, oh.data());
  return SL_OK;
}

// Prefill runs on tensor cores (kernels_cl/attention_mma.cl): consecutive positions of one
// sequence, at least kMmaMinRun of them — shorter runs (decode tokens) read their keys once anyway,
// and the portable kernels split long histories across the GPU where the mma kernel would not.
constexpr uint32_t kMmaMinRun = 16;
constexpr uint32_t kMmaBlock = 64;  // AM_BQ and AM_BK in attention_mma.cl
constexpr uint32_t kMmaGroup = 128; // AM_WG

struct QueryRun {
  uint32_t first_token, n_tokens;
  int32_t first_pos, seq;
};

// The batch as runs of consecutive positions of one sequence.
std::vector<QueryRun> query_runs(const sl_backend* be) {
  std::vector<QueryRun> runs;
  for (uint32_t t = 0; t < be->positions.size(); ++t) {
    if (!runs.empty()) {
      auto& r = runs.back();
      if (r.seq == be->seq_slots[t] && r.first_pos + static_cast<int32_t>(r.n_tokens) == be->positions[t]) {
        ++r.n_tokens;
        continue;
      }
    }
    runs.push_back({t, 1, be->positions[t], be->seq_slots[t]});
  }
  return runs;
}

// Whether prefill runs go through attention_mma: an sm_80+ NVIDIA device with PTX on, a head_dim
// the kernel is built for (multiples of 16 up to 128: its registers hold head_dim / 2 accumulators),
// and no recent window in this batch — with one, a key is read exactly by some queries of a run and
// through the codec by others, which one gathered copy cannot give. SLUICE_OPENCL_MMA_ATT=0 keeps
// the portable kernels; a program that fails to build is reported once and the portable kernels serve.
bool mma_attention_applies(sl_backend* be, const sl_kv_cache* c, const sl_attention_params* p) {
  static const bool off = [] {
    const char* e = std::getenv("SLUICE_OPENCL_MMA_ATT");
    return e && std::strcmp(e, "0") == 0;
  }();
  if (off || !be->use_ptx || be->caps.sm < 80 || keeps_recent(be, c)) return false;
  if (p->head_dim % 16 || p->head_dim > 128) return false;
  int& state = be->att_mma_state[p->head_dim];
  if (state == 0) {
    try {
      kernel(be, "attention_mma_d" + std::to_string(p->head_dim), "attention_mma");
      state = 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "opencl: tensor-core prefill attention unavailable, the portable kernels serve: %s\n", e.what());
      state = -1;
    }
  }
  return state == 1;
}

// Key splits of attention_mma: enough work-groups for kMmaGroupsPerCu on every compute unit (a work-group
// holds ~170 registers a work-item, so about 3 fit on an H100 compute unit at once, and more waves
// even out the tail), each split keeping at least 4 key tiles. SLUICE_OPENCL_MMA_ATT_SPLITS (1..64)
// forces a count, for measuring.
constexpr uint64_t kMmaGroupsPerCu = 8;
uint32_t mma_splits(const sl_backend* be, uint64_t groups, uint32_t key_tiles) {
  static const long knob = env_knob("SLUICE_OPENCL_MMA_ATT_SPLITS", [](long v) { return v >= 1 && v <= 64; });
  if (knob) return static_cast<uint32_t>(knob);
  const uint64_t want = (kMmaGroupsPerCu * std::max<uint32_t>(be->caps.compute_units, 1) + groups - 1) / groups;
  return static_cast<uint32_t>(std::clamp<uint64_t>(std::min<uint64_t>(want, key_tiles / 4), 1, 64));
}

// Arguments first..first+5 of the kernels that read a layer's pages (kv_write, attention,
// kv_gather_f16): the layer's buffer, page size, positions a page, KV heads, K and V row bytes.
void set_layer_args(cl::Kernel& kn, cl_uint first, const sl_kv_cache* c, uint32_t layer) {
  const auto& L = c->layout;
  kn.setArg(first, c->device_layers[layer]);
  kn.setArg(first + 1, static_cast<cl_ulong>(c->page_bytes));
  kn.setArg(first + 2, static_cast<cl_uint>(L.page_tokens));
  kn.setArg(first + 3, static_cast<cl_uint>(L.n_kv_heads));
  kn.setArg(first + 4, static_cast<cl_uint>(c->k_format.row_bytes));
  kn.setArg(first + 5, static_cast<cl_uint>(c->v_format.row_bytes));
}

// Arguments 2-11 of kv_write and attention (kernels_cl/attention.cl): where the layer's pages are and
// how they are laid out, and the batch's positions, sequence slots and page table.
void set_page_args(cl::Kernel& kn, const sl_backend* be, const sl_kv_cache* c, uint32_t layer) {
  set_layer_args(kn, 2, c, layer);
  kn.setArg(8, be->d_positions);
  kn.setArg(9, be->d_seq_slots);
  kn.setArg(10, be->d_page_table);
  kn.setArg(11, static_cast<cl_uint>(be->max_pages));
}

// One run's attention on tensor cores: its keys and values (from the window start of its first
// query to its last position) gathered as f16 rows per KV head, then attention_mma over them.
void mma_attention_run(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const sl_attention_params* p,
                       sl_buffer* out, sl_kv_cache::Kernels& ks, const QueryRun& run) {
  const auto& L = c->layout;
  const uint32_t D = p->head_dim;
  const int32_t last = run.first_pos + static_cast<int32_t>(run.n_tokens) - 1;
  const int32_t k_lo = p->window ? std::max<int32_t>(0, run.first_pos - static_cast<int32_t>(p->window) + 1) : 0;
  const uint32_t n_keys = static_cast<uint32_t>(last - k_lo + 1);
  const uint32_t n_pad = (n_keys + kMmaBlock - 1) / kMmaBlock * kMmaBlock;
  const uint64_t bytes = uint64_t(L.n_kv_heads) * n_pad * D * 2;
  cl::Buffer& kx = be->att_k16.at_least(be->context, bytes);
  cl::Buffer& vx = be->att_v16.at_least(be->context, bytes);
  auto& gk = ks.gather;
  set_layer_args(gk, 0, c, layer);
  gk.setArg(6, be->d_page_table);
  gk.setArg(7, static_cast<cl_uint>(static_cast<uint32_t>(run.seq) * be->max_pages));
  gk.setArg(8, static_cast<cl_int>(k_lo));
  gk.setArg(9, static_cast<cl_uint>(n_keys));
  gk.setArg(10, static_cast<cl_uint>(n_pad));
  gk.setArg(11, kx);
  gk.setArg(12, vx);
  launch(be, gk, cl::NDRange(D, n_pad, L.n_kv_heads), D <= be->caps.max_wg ? cl::NDRange(D, 1, 1) : cl::NullRange);
  auto& mk = kernel(be, "attention_mma_d" + std::to_string(D), "attention_mma");
  mk.setArg(0, single(q));
  mk.setArg(1, single(out));
  mk.setArg(2, kx);
  mk.setArg(3, vx);
  mk.setArg(4, static_cast<cl_uint>(n_pad));
  mk.setArg(5, static_cast<cl_int>(k_lo));
  mk.setArg(6, static_cast<cl_uint>(run.first_token));
  mk.setArg(7, static_cast<cl_int>(run.first_pos));
  mk.setArg(8, static_cast<cl_uint>(run.n_tokens));
  mk.setArg(9, static_cast<cl_uint>(p->n_heads));
  mk.setArg(10, static_cast<cl_uint>(p->n_heads / p->n_kv_heads));
  mk.setArg(11, p->scale);
  mk.setArg(12, static_cast<cl_uint>(p->window));
  mk.setArg(13, p->softcap);
  mk.setArg(14, p->sinks ? single(p->sinks) : be->d_positions);
  mk.setArg(15, static_cast<cl_uint>(p->sinks ? 1 : 0));
  const uint32_t blocks = (run.n_tokens + kMmaBlock - 1) / kMmaBlock;
  const uint32_t splits = mma_splits(be, blocks * p->n_heads, n_pad / kMmaBlock);
  mk.setArg(16, static_cast<cl_uint>(splits));
  const uint64_t partial_bytes = uint64_t(run.n_tokens) * p->n_heads * splits * (D + 2) * 4;
  mk.setArg(17, splits > 1 ? be->att_mma_partial.at_least(be->context, partial_bytes) : single(out));  // unused with one split
  launch(be, mk, cl::NDRange(size_t(kMmaGroup) * blocks, p->n_heads, splits), cl::NDRange(kMmaGroup, 1, 1));
  if (splits > 1) {
    auto& merge = kernel(be, "attention_mma_d" + std::to_string(D), "attention_mma_merge");
    merge.setArg(0, be->att_mma_partial.buffer);
    merge.setArg(1, single(out));
    merge.setArg(2, static_cast<cl_uint>(splits));
    merge.setArg(3, static_cast<cl_uint>(run.first_token));
    merge.setArg(4, static_cast<cl_uint>(p->n_heads));
    launch(be, merge, cl::NDRange(D, size_t(run.n_tokens) * p->n_heads), cl::NDRange(D, 1));
  }
}

}  // namespace

bool codec_has_opencl(const sl_kvcodec_api* api, const sl_kvcodec* codec) { return codec_source(api, codec) != nullptr; }

sl_status kv_create(sl_backend* be, const sl_kv_layout* layout, sl_kv_cache** out, sl_error* err) {
  if (!layout || !layout->k_api || !layout->v_api || !layout->k_codec || !layout->v_codec || layout->page_tokens == 0 ||
      layout->head_dim == 0 || layout->n_kv_heads == 0)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_create: incomplete layout");
  return guarded(err, "kv_create", [&] {
    auto c = std::make_unique<sl_kv_cache>();
    // An older host's layout is shorter: take what it has; the rest (the recent window) stays 0.
    std::memcpy(&c->layout, layout, std::min<std::size_t>(layout->struct_size, sizeof(sl_kv_layout)));
    c->layout.struct_size = sizeof(sl_kv_layout);
    if (c->layout.n_recent_pages == 0) c->layout.recent_window = 0;
    const uint64_t recent_bytes = uint64_t(c->layout.n_recent_pages) * 2 * layout->n_kv_heads * layout->page_tokens * layout->head_dim * 2;
    c->k_format.struct_size = sizeof(sl_kv_format);
    c->v_format.struct_size = sizeof(sl_kv_format);
    layout->k_api->get_format(layout->k_codec, &c->k_format);
    layout->v_api->get_format(layout->v_codec, &c->v_format);
    c->page_bytes = static_cast<uint64_t>(layout->n_kv_heads) * layout->page_tokens *
                    (c->k_format.row_bytes + c->v_format.row_bytes);
    const uint64_t layer_bytes = c->page_bytes * layout->n_pages;
    const bool allow_device = be->options.find("host-kv") == std::string::npos;
    c->on_device = allow_device && codec_has_opencl(layout->k_api, layout->k_codec) &&
                   codec_has_opencl(layout->v_api, layout->v_codec) && layer_bytes <= be->caps.max_alloc &&
                   recent_bytes <= be->caps.max_alloc;
    // The fused path unless the options ask for the generic kernel (tests compare the two).
    const bool allow_fused = be->options.find("generic-attention") == std::string::npos && !std::getenv("SLUICE_OPENCL_GENERIC_ATTENTION");
    c->k_fused = allow_fused && has_fused_keys(codec_source(layout->k_api, layout->k_codec));
    c->v_fused = allow_fused && has_fused_values(codec_source(layout->v_api, layout->v_codec));
    if (c->on_device) {
      // The codecs' device functions must follow docs/PLUGINS.md (SL_KV_FN(encode_row), SL_KV_FN(load)):
      // source that does not build with ours sends this cache to the host path instead of failing later.
      try {
        cache_kernels(be, c.get(), 1);
      } catch (const std::exception& e) {
        c->on_device = false;
        c->kernels.clear();
        c->fallback_reason = e.what();
        std::fprintf(stderr, "opencl: the KV cache stays on the host (slow): %s\n", e.what());
      }
    }
    if (c->on_device) {
      for (uint32_t l = 0; l < layout->n_layers; ++l) {
        c->device_layers.emplace_back(be->context, CL_MEM_READ_WRITE, std::max<uint64_t>(layer_bytes, 4));
        const cl_uchar zero = 0;
        be->queue.enqueueFillBuffer(c->device_layers.back(), zero, 0, std::max<uint64_t>(layer_bytes, 4));
        if (recent_bytes) c->recent_layers.emplace_back(be->context, CL_MEM_READ_WRITE, recent_bytes);
      }
      be->queue.finish();  // out of device memory shows here
    } else {
      c->host_layers.assign(layout->n_layers, std::vector<std::byte>(layer_bytes));
      c->host_recent.assign(layout->n_layers, std::vector<uint16_t>(recent_bytes / 2));
    }
    *out = c.release();
    return SL_OK;
  });
}

void kv_destroy(sl_backend* be, sl_kv_cache* cache) {
  if (!cache) return;
  try {
    be->queue.finish();
  } catch (...) {
  }
  delete cache;
}

sl_status kv_copy_page(sl_backend* be, sl_kv_cache* c, uint32_t src, uint32_t dst, sl_error* err) {
  if (src >= c->layout.n_pages || dst >= c->layout.n_pages)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_copy_page: page out of range");
  if (src == dst) return SL_OK;
  return guarded(err, "kv_copy_page", [&] {
    for (uint32_t l = 0; l < c->layout.n_layers; ++l) {
      if (c->on_device)
        be->queue.enqueueCopyBuffer(c->device_layers[l], c->device_layers[l], src * c->page_bytes, dst * c->page_bytes, c->page_bytes);
      else
        std::memcpy(c->host_layers[l].data() + dst * c->page_bytes, c->host_layers[l].data() + src * c->page_bytes, c->page_bytes);
    }
    return SL_OK;
  });
}

namespace {

// kv_write's kernel on the device, kv_write_rope with the rope pair `rope` (null: kv_write).
void launch_kv_write(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* k, const sl_buffer* v,
                     const PendingRope* rope) {
  const auto& L = c->layout;
  const uint32_t n_tokens = static_cast<uint32_t>(be->positions.size());
  auto& ks = c->kernels.empty() ? cache_kernels(be, c, 1) : c->kernels.begin()->second;
  auto& kn = rope ? ks.write_rope : ks.kv_write;
  kn.setArg(0, single(k));
  kn.setArg(1, single(v));
  set_page_args(kn, be, c, layer);
  kn.setArg(12, static_cast<cl_uint>(n_tokens));
  const bool recent = keeps_recent(be, c);
  kn.setArg(13, recent ? c->recent_layers[layer] : c->device_layers[layer]);  // unused when !recent
  kn.setArg(14, recent ? be->d_recent_table : be->d_page_table);
  kn.setArg(15, static_cast<cl_uint>(recent ? 1 : 0));
  if (rope) {
    kn.setArg(16, single(rope->x));
    kn.setArg(17, static_cast<cl_uint>(rope->n_heads));
    kn.setArg(18, be->d_inv_freq);
    kn.setArg(19, static_cast<cl_uint>(rope->half));
    kn.setArg(20, rope->factor);
    kn.setArg(21, static_cast<cl_uint>(rope->style));
  }
  launch(be, kn, cl::NDRange(size_t(ks.wide_wg) * n_tokens * L.n_kv_heads), cl::NDRange(ks.wide_wg));
}

}  // namespace

void kv_write_flush(sl_backend* be) {
  if (!be->pending_kv.cache) return;
  const PendingKvWrite w = be->pending_kv;
  be->pending_kv = PendingKvWrite{};
  launch_kv_write(be, w.cache, w.layer, w.k, w.v, w.rope.x ? &w.rope : nullptr);
}

sl_status kv_write(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* k, const sl_buffer* v, sl_error* err) {
  const auto& L = c->layout;
  if (layer >= L.n_layers) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_write: layer out of range");
  if (auto s = check_pages(be, c, err); s != SL_OK) return s;
  const uint32_t n_tokens = static_cast<uint32_t>(be->positions.size());
  const uint64_t floats = uint64_t(n_tokens) * L.n_kv_heads * L.head_dim;
  if (k->bytes < floats * 4 || v->bytes < floats * 4) return set_error(err, SL_ERR_INVALID_ARGUMENT, "kv_write: K/V buffers too small");
  return guarded(err, "kv_write", [&] {
    // The rope of q and k right before (deferred: cl_ops.cpp) runs in this launch where k is its
    // second tensor and the cache is on the device; anything else waiting runs first, as the other
    // entry points run it (cl_backend.cpp). A decode kv_write then waits for its attention (above).
    PendingRope pair;
    const bool joined = c->on_device && take_rope_pair(be, k, v, L.n_kv_heads, L.head_dim, pair);
    flush_deferred(be);
    if (c->on_device && attention_join_on(be) && one_token_per_sequence(be)) {
      be->pending_kv = PendingKvWrite{c, layer, k, v, joined ? pair : PendingRope{}};
      return SL_OK;
    }
    if (c->on_device) {
      launch_kv_write(be, c, layer, k, v, joined ? &pair : nullptr);
      return SL_OK;
    }
    std::vector<float> kh(floats), vh(floats);
    be->queue.enqueueReadBuffer(single(k), CL_TRUE, 0, floats * 4, kh.data());
    be->queue.enqueueReadBuffer(single(v), CL_TRUE, 0, floats * 4, vh.data());
    for (uint32_t t = 0; t < n_tokens; ++t) {
      const uint32_t pos = static_cast<uint32_t>(be->positions[t]);
      const uint32_t page = static_cast<uint32_t>(
          be->page_table[static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages + pos / L.page_tokens]);
      const uint32_t slot = pos % L.page_tokens;
      for (uint32_t h = 0; h < L.n_kv_heads; ++h) {
        const std::size_t src = (std::size_t(t) * L.n_kv_heads + h) * L.head_dim;
        if (auto s = L.k_api->encode(L.k_codec, kh.data() + src, 1, host_k_row(c, layer, page, h, slot), err); s != SL_OK) return s;
        if (auto s = L.v_api->encode(L.v_codec, vh.data() + src, 1, host_v_row(c, layer, page, h, slot), err); s != SL_OK) return s;
      }
      const int32_t rpage =
          keeps_recent(be, c) ? be->recent_table[static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages + pos / L.page_tokens] : -1;
      for (uint32_t h = 0; rpage >= 0 && h < L.n_kv_heads; ++h) {
        const std::size_t src = (std::size_t(t) * L.n_kv_heads + h) * L.head_dim;
        uint16_t* kd = host_recent_row(c, layer, rpage, 0, h, slot);
        uint16_t* vd = host_recent_row(c, layer, rpage, 1, h, slot);
        for (uint32_t d = 0; d < L.head_dim; ++d) {
          kd[d] = sluice::cpu::f32_to_f16(kh[src + d]);
          vd[d] = sluice::cpu::f32_to_f16(vh[src + d]);
        }
      }
    }
    return SL_OK;
  });
}

namespace {

// The most keys a query of the batch attends.
int32_t longest_history(const sl_backend* be, const sl_attention_params* p) {
  int32_t longest = 1;
  for (const int32_t pos : be->positions) {
    const int32_t lo = p->window ? std::max<int32_t>(0, pos - static_cast<int32_t>(p->window) + 1) : 0;
    longest = std::max(longest, pos - lo + 1);
  }
  return longest;
}

// Whether the portable attention takes attention_short (else the fused or the generic kernel).
bool takes_short_passes(const sl_backend* be, const sl_kv_cache::Kernels& ks, const sl_attention_params* p) {
  return ks.hpw == 0 && ks.short_passes() && longest_history(be, p) <= short_passes_max_keys(be);
}

// The portable attention kernels over the whole batch (attention.cl, attention_fused.cl); `join`:
// the waiting kv_write that attention_short_join runs in its launch (takes_short_passes holds).
void portable_attention(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const sl_attention_params* p,
                        sl_buffer* out, sl_kv_cache::Kernels& ks, const PendingKvWrite* join) {
  const auto& L = c->layout;
  const uint32_t n_tokens = static_cast<uint32_t>(be->positions.size());
  const uint64_t floats = uint64_t(n_tokens) * p->n_heads * p->head_dim;
  const uint32_t group = p->n_heads / p->n_kv_heads;
  // Long histories with few (token, KV head) pairs leave most of a GPU idle: split the keys and merge.
  const int32_t longest = longest_history(be, p);
  const bool fused = ks.hpw > 0;
  const bool short_passes = takes_short_passes(be, ks, p);
  const uint32_t heads_per_group = fused ? ks.hpw : group;  // query heads one work-group serves
  const uint64_t groups = uint64_t(n_tokens) * p->n_heads / heads_per_group;
  const uint32_t cu = std::max<uint32_t>(be->caps.compute_units, 1);
  const uint32_t wg = short_passes ? ks.wide_wg : attention_wg();
  uint32_t splits = 1;
  // Several work-groups per compute unit: these kernels wait on memory between short bursts of
  // work, and more groups in flight hide that (one split per 2 tiles of keys at least; one pass of
  // attention_short's 64 keys). Measured on the H100 at depth 32768 (perf/results/kv_codecs_gpu.md):
  // the generic kernel is best at 8 (f16 63.1 against 60.4 at 4 and 59.6 at 16), the fused one at 4
  // (turbo3 73.2–73.6 against 70.5–70.8 at 8 and 65.1 at 2), also since its query is prepared once
  // per token; attention_short's groups are four times as wide as the generic kernel's.
  // SLUICE_OPENCL_ATT_GROUPS_PER_CU overrides them all, for measuring (perf/NOTES.md).
  static const long per_cu_knob = env_knob("SLUICE_OPENCL_ATT_GROUPS_PER_CU", [](long v) { return v > 0 && v <= 64; });
  const uint64_t per_cu = per_cu_knob ? static_cast<uint64_t>(per_cu_knob) : fused || short_passes ? 4 : 8;
  if (groups < per_cu * cu) {
    const uint64_t want = (per_cu * cu + groups - 1) / groups;
    const uint64_t most = std::max<int64_t>(1, short_passes ? longest / 64 : longest / (2 * int64_t(attention_wg())));
    splits = static_cast<uint32_t>(std::min<uint64_t>({want, most, 256}));
  }
  if (splits > 1) be->att_partial.at_least(be->context, floats / p->head_dim * splits * (p->head_dim + 2) * 4);
  // Decode of one token on NVIDIA: the output's 15-bit form too (att_write), so that the output
  // projection's dp4a product needs no rounding launch — where every warp holds whole 32-column blocks.
  const uint64_t cols = uint64_t(p->n_heads) * p->head_dim;
  cl::Buffer *oq = nullptr, *oblocks = nullptr;
  const bool q15 = ks.ptx && n_tokens == 1 && p->head_dim % 32 == 0 && attention_wg() % 32 == 0 && ks.wide_wg % 32 == 0 &&
                   int15_scratch(be, 1, cols, oq, oblocks);
  auto& kn = fused ? ks.fused : join ? ks.short_join : short_passes ? ks.short_passes : ks.attention;
  const bool recent = keeps_recent(be, c);
  kn.setArg(0, single(q));
  kn.setArg(1, single(out));
  set_page_args(kn, be, c, layer);
  kn.setArg(12, p->scale);
  kn.setArg(13, static_cast<cl_uint>(p->window));
  kn.setArg(14, p->softcap);
  kn.setArg(15, p->sinks ? single(p->sinks) : be->d_positions);
  kn.setArg(16, static_cast<cl_uint>(p->sinks ? 1 : 0));
  kn.setArg(17, static_cast<cl_uint>(splits));
  kn.setArg(18, splits > 1 ? be->att_partial.buffer : single(out));
  kn.setArg(19, recent ? c->recent_layers[layer] : c->device_layers[layer]);  // unused when !recent
  kn.setArg(20, recent ? be->d_recent_table : be->d_page_table);
  kn.setArg(21, static_cast<cl_uint>(recent ? c->layout.recent_window : 0));
  if (fused) {
    const uint32_t k_area = static_cast<uint32_t>(k_query_area(c)), v_area = static_cast<uint32_t>(v_acc_area(c));
    const size_t image_bytes = (size_t(4) * ks.hpw * k_area + 15) / 16 * 16;  // float4s in the kernels (Q_IMAGE4)
    if (c->k_fused) {
      // The query areas once per (token, work-group of heads); every key split copies its own.
      auto& qk = ks.fused_queries;
      qk.setArg(0, single(q));
      qk.setArg(1, be->att_q_images.at_least(be->context, uint64_t(image_bytes) * groups));
      qk.setArg(2, static_cast<cl_uint>(L.n_kv_heads));
      qk.setArg(3, cl::Local(image_bytes));
      qk.setArg(4, static_cast<cl_uint>(k_area));
      launch(be, qk, cl::NDRange(size_t(ks.wide_wg) * p->n_heads / heads_per_group, n_tokens), cl::NDRange(ks.wide_wg, 1));
    }
    kn.setArg(22, cl::Local(image_bytes));
    kn.setArg(23, static_cast<cl_uint>(k_area));
    kn.setArg(24, cl::Local(size_t(4) * ks.hpw * v_area));
    kn.setArg(25, static_cast<cl_uint>(v_area));
    kn.setArg(26, c->k_fused ? be->att_q_images.buffer : single(q));  // unused without fused keys
  }
  const cl_uint form_arg = fused ? 27 : 22;
  kn.setArg(form_arg, q15 ? *oq : single(out));  // unread without q15
  kn.setArg(form_arg + 1, q15 ? *oblocks : single(out));
  kn.setArg(form_arg + 2, static_cast<cl_uint>(q15));
  // The joined kv_write's rows and rope (attention_short_join's last arguments; half 0: no rope).
  const PendingRope* rope = join && join->rope.x ? &join->rope : nullptr;
  if (join) {
    kn.setArg(25, single(join->k));
    kn.setArg(26, single(join->v));
    kn.setArg(27, rope ? be->d_inv_freq : be->d_positions);  // unread without a rope
    kn.setArg(28, static_cast<cl_uint>(rope ? rope->half : 0));
    kn.setArg(29, rope ? rope->factor : 0.0f);
    kn.setArg(30, static_cast<cl_uint>(rope ? rope->style : 0));
  }
  launch(be, kn, cl::NDRange(size_t(wg) * p->n_heads / heads_per_group, n_tokens, splits), cl::NDRange(wg, 1, 1));
  if (splits > 1) {
    auto& mk = ks.merge;
    mk.setArg(0, be->att_partial.buffer);
    mk.setArg(1, single(out));
    mk.setArg(2, static_cast<cl_uint>(splits));
    mk.setArg(3, q15 ? *oq : single(out));
    mk.setArg(4, q15 ? *oblocks : single(out));
    mk.setArg(5, static_cast<cl_uint>(q15));
    mk.setArg(6, static_cast<cl_uint>(cols));
    // The splits rotated the joined query in registers only: the merge writes it back (attention.cl).
    mk.setArg(7, single(q));
    mk.setArg(8, be->d_positions);
    mk.setArg(9, rope ? be->d_inv_freq : be->d_positions);  // unread without a rope
    mk.setArg(10, static_cast<cl_uint>(rope ? rope->half : 0));
    mk.setArg(11, rope ? rope->factor : 0.0f);
    mk.setArg(12, static_cast<cl_uint>(rope ? rope->style : 0));
    launch(be, mk, cl::NDRange(size_t(ks.wide_wg) * n_tokens * p->n_heads), cl::NDRange(ks.wide_wg));  // MERGE_WG
  }
  if (q15) int15_made(be, out, static_cast<uint32_t>(cols));
}

}  // namespace

namespace {

sl_status checked_attention(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const sl_attention_params* p,
                            sl_buffer* out, sl_error* err) {
  const auto& L = c->layout;
  if (layer >= L.n_layers) return set_error(err, SL_ERR_INVALID_ARGUMENT, "attention: layer out of range");
  if (!p || p->n_kv_heads != L.n_kv_heads || p->head_dim != L.head_dim || p->n_kv_heads == 0 || p->n_heads % p->n_kv_heads)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "attention: head shape does not match the KV cache");
  if (auto s = check_pages(be, c, err); s != SL_OK) return s;
  const uint32_t n_tokens = static_cast<uint32_t>(be->positions.size());
  const uint64_t floats = uint64_t(n_tokens) * p->n_heads * p->head_dim;
  if (q->bytes < floats * 4 || out->bytes < floats * 4)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "attention: query/output buffers too small");
  return guarded(err, "attention", [&] {
    if (!c->on_device) {
      flush_deferred(be);
      return host_attention(be, c, layer, q, p, out, err);
    }
    const uint32_t group = p->n_heads / p->n_kv_heads;
    auto& ks = cache_kernels(be, c, group);
    // Prefill runs on tensor cores where they apply. The portable kernels below then run only if
    // some token is outside such a run — over the whole batch, as they are built, and before the
    // runs' kernels, which overwrite their tokens' rows.
    std::vector<QueryRun> mma_runs;
    uint32_t in_runs = 0;
    if (n_tokens >= kMmaMinRun && mma_attention_applies(be, c, p))
      for (const auto& run : query_runs(be))
        if (run.n_tokens >= kMmaMinRun) {
          mma_runs.push_back(run);
          in_runs += run.n_tokens;
        }
    // The kv_write waiting for this attention (kv_write above) joins its launch where it is this
    // cache's and layer's, its rope pair's first tensor is q (n_heads heads), attention_short takes
    // the batch and no buffer the kernel writes is another argument; otherwise it runs first.
    const PendingKvWrite w = be->pending_kv;
    const bool joins = w.cache == c && w.layer == layer && ks.short_join() && mma_runs.empty() &&
                       takes_short_passes(be, ks, p) && (!w.rope.x || (w.rope.x == q && w.rope.n_heads == p->n_heads)) &&
                       out != q && out != w.k && out != w.v && q != w.k && q != w.v && p->sinks != out &&
                       p->sinks != q && p->sinks != w.k;
    if (joins) be->pending_kv = PendingKvWrite{};
    flush_deferred(be);
    if (in_runs < n_tokens) portable_attention(be, c, layer, q, p, out, ks, joins ? &w : nullptr);
    for (const auto& run : mma_runs) mma_attention_run(be, c, layer, q, p, out, ks, run);
    return SL_OK;
  });
}

}  // namespace

// Runs what waits first where the checks fail (the other entry points' order).
sl_status attention(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const sl_attention_params* p,
                    sl_buffer* out, sl_error* err) {
  const sl_status s = checked_attention(be, c, layer, q, p, out, err);
  if (s != SL_OK) {
    sl_error ignored{};
    guarded(&ignored, "a deferred op", [&] {
      flush_deferred(be);
      return SL_OK;
    });
  }
  return s;
}

}  // namespace sluice::ocl
