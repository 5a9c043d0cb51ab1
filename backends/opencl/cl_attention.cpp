// Attention over the paged KV cache (cl_kv_cache.cpp): decode-then-attend on the host for codecs
// without OpenCL source; on the device the portable kernels over the whole batch — the generic one
// (kernels_cl/attention.cl), the fused one where a codec has fused functions (attention_fused.cl),
// short passes for short histories (attention_short.cl; attention_short_join also runs a waiting
// decode kv_write in its launch) — and tensor cores for prefill runs (attention_mma.cl).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cl_attention_path.h"
#include "cl_kv_cache.h"
#include "util/recent_window.h"
#include "util/vec.h"  // f16 conversions of the recent window on the host path

namespace sluice::ocl {
namespace {

// The first key a query at `pos` reads exactly (as att_exact_from in kernels_cl/attention.cl).
int32_t exact_from(const sl_backend* be, const sl_kv_cache* c, int32_t seq, int32_t pos, int32_t lo) {
  if (!keeps_recent(be, c)) return pos + 1;
  return recent_exact_from(be->recent_table.data() + static_cast<std::size_t>(seq) * be->max_pages, c->layout.recent_window,
                           c->layout.page_tokens, pos, lo);
}

// Decode-then-attend on the host, for codecs without OpenCL source: the layer's widths (D for
// queries and keys, DV for values), codecs and table.
sl_status host_attention(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const AttentionParams* p,
                         sl_buffer* out, sl_error* err) {
  const auto& L = c->layout;
  const KvLayerShape& Ly = c->layers[layer];
  const uint32_t D = Ly.k_dim, DV = Ly.v_dim, group = p->n_heads / p->n_kv_heads;
  const std::size_t n_tokens = be->positions.size(), row = std::size_t(p->n_heads) * D, out_row = std::size_t(p->n_heads) * DV;
  std::vector<float> qh(n_tokens * row), oh(n_tokens * out_row), sinks;
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
    const int32_t* table = table_of(be, c, layer).data() + static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages;
    for (uint32_t kvh = 0; kvh < Ly.n_kv_heads; ++kvh) {
      keys.resize(n * D);
      values.resize(n * DV);
      for (int32_t at = lo; at <= pos;) {
        const uint32_t page = static_cast<uint32_t>(table[at / L.page_tokens]), slot = at % L.page_tokens;
        const uint32_t run = std::min<uint32_t>(L.page_tokens - slot, static_cast<uint32_t>(pos - at + 1));
        float* kd = keys.data() + static_cast<std::size_t>(at - lo) * D;
        float* vd = values.data() + static_cast<std::size_t>(at - lo) * DV;
        if (auto s = Ly.k_api->decode(Ly.k_codec, host_k_row(c, layer, page, kvh, slot), run, kd, err); s != SL_OK) return s;
        if (auto s = Ly.v_api->decode(Ly.v_codec, host_v_row(c, layer, page, kvh, slot), run, vd, err); s != SL_OK) return s;
        at += static_cast<int32_t>(run);
      }
      // The recent window's keys and values: the exact rows instead of the decoded ones.
      const int32_t exact = exact_from(be, c, be->seq_slots[t], pos, lo);
      for (int32_t j = exact; j <= pos; ++j) {
        const int32_t rpage = be->recent_table[static_cast<std::size_t>(be->seq_slots[t]) * be->max_pages + j / L.page_tokens];
        const uint16_t* kx = host_recent_row(c, layer, rpage, 0, kvh, j % L.page_tokens);
        const uint16_t* vx = host_recent_row(c, layer, rpage, 1, kvh, j % L.page_tokens);
        for (uint32_t d = 0; d < D; ++d) keys[static_cast<std::size_t>(j - lo) * D + d] = sluice::cpu::f16_to_f32(kx[d]);
        for (uint32_t d = 0; d < DV; ++d) values[static_cast<std::size_t>(j - lo) * DV + d] = sluice::cpu::f16_to_f32(vx[d]);
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
        float* o = oh.data() + t * out_row + std::size_t(h) * DV;
        std::fill(o, o + DV, 0.0f);
        for (std::size_t j = 0; j < n; ++j) {
          const float w = scores[j] / sum;
          for (uint32_t d = 0; d < DV; ++d) o[d] += w * values[j * DV + d];
        }
      }
    }
  }
  be->queue.enqueueWriteBuffer(single(out), CL_TRUE, 0, oh.size() * 4, oh.data());
  return SL_OK;
}

// Prefill runs on tensor cores (kernels_cl/attention_mma.cl): consecutive positions of one
// sequence, at least tuning mma_att_min_run of them — shorter runs (decode tokens) read their keys
// once anyway, and the portable kernels split long histories across the GPU where the mma kernel would not.
constexpr uint32_t kMmaBlock = 64;  // AM_BK in attention_mma.cl: the keys a tile

// The program of attention_mma for a head size and the queries a work-group takes (AM_BQ, tuning
// mma_att_queries: 64 or 128, a warp per 16; its work-group is 2·AM_BQ work-items).
std::string mma_program(const sl_backend* be, uint32_t head_dim) {
  const uint32_t bq = be->tuning.mma_att_queries;
  return "attention_mma_d" + std::to_string(head_dim) + (bq == 64 ? "" : "_q" + std::to_string(bq));
}

struct QueryRun {
  uint32_t first_token, n_tokens;
  int32_t first_pos, seq;
  int32_t recent_floor = 0;  // with a recent window: attention_mma's floor (cl_attention_path.h)
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
    runs.push_back({t, 1, be->positions[t], be->seq_slots[t], 0});
  }
  return runs;
}

// Whether prefill runs go through attention_mma: an sm_80+ NVIDIA device with PTX on, a layer of
// the layout's widths (a geometry with the fast paths, cl_kv_geometry.h) whose cache holds no more than
// f16 precision (mma_keeps_cache_precision), a head_dim the kernel is
// built for (multiples of 16 up to 128: its registers hold head_dim / 2 accumulators). With a recent
// window a key is read exactly by some queries of a run and through the codec by others: the mma
// kernel takes each query's codec keys and attention_recent_partial its exact ones (a work-group of
// head_dim), merged as key splits — where one floor describes the run (mma_recent_floor). Tuning
// mma_att = 0 keeps the portable kernels; a program that fails to build is reported once and the
// portable kernels serve.
bool mma_attention_applies(sl_backend* be, const sl_kv_cache* c, uint32_t layer, const AttentionParams* p) {
  const auto& shape = c->geometry(layer).shape;
  if (!shape.fast_paths || !mma_keeps_cache_precision(shape.k_format.bits_per_value, shape.v_format.bits_per_value)) return false;
  if (!be->tuning.mma_att || !be->use_ptx || be->caps.sm < 80) return false;
  if (p->head_dim % 16 || p->head_dim > 128 || c->layers[layer].v_dim != p->head_dim) return false;
  if (keeps_recent(be, c) && p->head_dim > be->caps.max_wg) return false;
  int& state = be->att_mma_state[mma_program(be, p->head_dim)];
  if (state == 0) {
    try {
      kernel(be, mma_program(be, p->head_dim), "attention_mma");
      state = 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "opencl: tensor-core prefill attention unavailable, the portable kernels serve: %s\n", e.what());
      state = -1;
    }
  }
  return state == 1;
}

// Key splits of attention_mma: enough work-groups for tuning mma_att_groups_per_cu on every compute
// unit (a work-group holds ~170 registers a work-item, so about 3 fit on an H100 compute unit at once,
// and more waves even out the tail), each split keeping at least mma_att_min_tiles key tiles.
// mma_att_splits (1..64) forces a count, for measuring.
uint32_t mma_splits(const sl_backend* be, uint64_t groups, uint32_t key_tiles) {
  const Tuning& t = be->tuning;
  if (t.mma_att_splits) return t.mma_att_splits;
  const uint64_t want = (uint64_t(t.mma_att_groups_per_cu) * std::max<uint32_t>(be->caps.compute_units, 1) + groups - 1) / groups;
  return static_cast<uint32_t>(std::clamp<uint64_t>(std::min<uint64_t>(want, key_tiles / t.mma_att_min_tiles), 1, 64));
}

// One run's attention on tensor cores: its keys and values (from the window start of its first
// query to its last position) gathered as f16 rows per KV head, then attention_mma over them.
void mma_attention_run(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const AttentionParams* p,
                       sl_buffer* out, sl_kv_cache::Kernels& ks, const QueryRun& run) {
  const KvLayerShape& Ly = c->layers[layer];
  const uint32_t D = p->head_dim;
  const int32_t last = run.first_pos + static_cast<int32_t>(run.n_tokens) - 1;
  const int32_t k_lo = p->window ? std::max<int32_t>(0, run.first_pos - static_cast<int32_t>(p->window) + 1) : 0;
  const uint32_t n_keys = static_cast<uint32_t>(last - k_lo + 1);
  const uint32_t n_pad = (n_keys + kMmaBlock - 1) / kMmaBlock * kMmaBlock;
  const uint64_t bytes = uint64_t(Ly.n_kv_heads) * n_pad * D * 2;
  cl::Buffer& kx = be->att_k16.at_least(be->context, bytes);
  cl::Buffer& vx = be->att_v16.at_least(be->context, bytes);
  // Codecs that decode rows together (turbo: its inverse transform across a work-group) gather
  // `rows` positions a work-group, a divisor of the page: one page's rows of a head are contiguous.
  const uint32_t rows = gather_rows_per_group(c->layout.page_tokens);
  const bool by_rows = ks.gather_rows() && rows > 0;
  auto& gk = by_rows ? ks.gather_rows : ks.gather;
  set_layer_args(gk, 0, c, layer);
  gk.setArg(6, device_table_of(be, c, layer));
  gk.setArg(7, static_cast<cl_uint>(static_cast<uint32_t>(run.seq) * be->max_pages));
  gk.setArg(8, static_cast<cl_int>(k_lo));
  gk.setArg(9, static_cast<cl_uint>(n_keys));
  gk.setArg(10, static_cast<cl_uint>(n_pad));
  gk.setArg(11, kx);
  gk.setArg(12, vx);
  if (by_rows) {
    gk.setArg(13, static_cast<cl_uint>(rows));
    const uint32_t chunks = (static_cast<uint32_t>(k_lo) % rows + n_pad + rows - 1) / rows;
    launch(be, gk, cl::NDRange(size_t(ks.wg) * chunks, Ly.n_kv_heads), cl::NDRange(ks.wg, 1));
  } else {
    launch(be, gk, cl::NDRange(D, n_pad, Ly.n_kv_heads), D <= be->caps.max_wg ? cl::NDRange(D, 1, 1) : cl::NullRange);
  }
  auto& mk = kernel(be, mma_program(be, D), "attention_mma");
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
  const uint32_t bq = be->tuning.mma_att_queries, group_size = 2 * bq;
  const uint32_t blocks = (run.n_tokens + bq - 1) / bq;
  const uint32_t splits = mma_splits(be, blocks * p->n_heads, n_pad / kMmaBlock);
  const bool recent = keeps_recent(be, c);
  const uint32_t stride = splits + (recent ? 1 : 0);  // partials a (row, head): the recent keys' is the last
  mk.setArg(16, static_cast<cl_uint>(splits));
  const uint64_t partial_bytes = uint64_t(run.n_tokens) * p->n_heads * stride * (D + 2) * 4;
  mk.setArg(17, stride > 1 ? be->att_mma_partial.at_least(be->context, partial_bytes) : single(out));  // unused with one split
  mk.setArg(18, static_cast<cl_uint>(stride));
  mk.setArg(19, static_cast<cl_uint>(recent ? c->layout.recent_window : 0));
  mk.setArg(20, static_cast<cl_int>(run.recent_floor));
  launch(be, mk, cl::NDRange(size_t(group_size) * blocks, p->n_heads, splits), cl::NDRange(group_size, 1, 1));
  if (recent) {
    auto& rk = ks.recent_partial;
    rk.setArg(0, single(q));
    rk.setArg(1, c->recent_layers[layer]);
    rk.setArg(2, be->d_recent_table);
    rk.setArg(3, static_cast<cl_uint>(be->max_pages));
    rk.setArg(4, static_cast<cl_uint>(run.seq));
    rk.setArg(5, static_cast<cl_uint>(c->layout.recent_window));
    rk.setArg(6, static_cast<cl_uint>(c->layout.page_tokens));
    rk.setArg(7, static_cast<cl_uint>(Ly.n_kv_heads));
    rk.setArg(8, static_cast<cl_uint>(run.first_token));
    rk.setArg(9, static_cast<cl_int>(run.first_pos));
    rk.setArg(10, static_cast<cl_uint>(p->n_heads));
    rk.setArg(11, static_cast<cl_uint>(p->n_heads / p->n_kv_heads));
    rk.setArg(12, p->scale);
    rk.setArg(13, static_cast<cl_uint>(p->window));
    rk.setArg(14, p->softcap);
    rk.setArg(15, static_cast<cl_uint>(splits));
    rk.setArg(16, static_cast<cl_uint>(stride));
    rk.setArg(17, be->att_mma_partial.buffer);
    launch(be, rk, cl::NDRange(size_t(D) * run.n_tokens, p->n_heads), cl::NDRange(D, 1));
  }
  if (stride > 1) {
    auto& merge = kernel(be, mma_program(be, D), "attention_mma_merge");
    merge.setArg(0, be->att_mma_partial.buffer);
    merge.setArg(1, single(out));
    merge.setArg(2, static_cast<cl_uint>(stride));
    merge.setArg(3, static_cast<cl_uint>(run.first_token));
    merge.setArg(4, static_cast<cl_uint>(p->n_heads));
    launch(be, merge, cl::NDRange(D, size_t(run.n_tokens) * p->n_heads), cl::NDRange(D, 1));
  }
}

// The most keys a query of the batch attends.
int32_t longest_history(const sl_backend* be, const AttentionParams* p) {
  int32_t longest = 1;
  for (const int32_t pos : be->positions) {
    const int32_t lo = p->window ? std::max<int32_t>(0, pos - static_cast<int32_t>(p->window) + 1) : 0;
    longest = std::max(longest, pos - lo + 1);
  }
  return longest;
}

// Whether the portable attention takes attention_short (else the fused or the generic kernel).
bool takes_short_passes(const sl_backend* be, const sl_kv_cache::Kernels& ks, const AttentionParams* p) {
  return ks.hpw == 0 && ks.short_passes() && longest_history(be, p) <= short_passes_max_keys(be);
}

// The portable attention kernels over the whole batch (attention.cl, attention_fused.cl); `join`:
// the kv_write (and rope pair) that attention_short_join runs in its launch (takes_short_passes holds).
void portable_attention(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const AttentionParams* p,
                        sl_buffer* out, sl_kv_cache::Kernels& ks, const KvJoin* join, Forms& forms) {
  const KvLayerShape& Ly = c->layers[layer];
  const sl_kv_cache::Geometry& geo = c->geometry(layer);
  const uint32_t n_tokens = static_cast<uint32_t>(be->positions.size());
  const uint32_t v_dim = Ly.v_dim;  // of the outputs and the splits' partial sums (p->head_dim: the queries')
  const uint32_t group = p->n_heads / p->n_kv_heads;
  // Long histories with few (token, KV head) pairs leave most of a GPU idle: split the keys and merge.
  const int32_t longest = longest_history(be, p);
  const bool fused = ks.hpw > 0;
  const bool short_passes = takes_short_passes(be, ks, p);
  const uint32_t heads_per_group = fused ? ks.hpw : group;  // query heads one work-group serves
  const uint64_t groups = uint64_t(n_tokens) * p->n_heads / heads_per_group;
  const uint32_t cu = std::max<uint32_t>(be->caps.compute_units, 1);
  const uint32_t wg = short_passes ? ks.wide_wg : ks.wg;
  uint32_t splits = 1;
  // Several work-groups per compute unit: these kernels wait on memory between short bursts of
  // work, and more groups in flight hide that (one split per 2 tiles of keys at least; one pass of
  // attention_short's 64 keys). Measured on the H100 at depth 32768 (perf/results/kv_codecs_gpu.md):
  // the generic kernel is best at 8 (f16 63.1 against 60.4 at 4 and 59.6 at 16), the fused one at 4
  // (turbo3 73.2–73.6 against 70.5–70.8 at 8 and 65.1 at 2), also since its query is prepared once
  // per token; attention_short's groups are four times as wide as the generic kernel's.
  // Tuning att_groups_per_cu (generic) and att_groups_per_cu_fused (fused, attention_short).
  const uint64_t per_cu = fused || short_passes ? be->tuning.att_groups_per_cu_fused : be->tuning.att_groups_per_cu;
  if (groups < per_cu * cu) {
    const uint64_t want = (per_cu * cu + groups - 1) / groups;
    const uint64_t most = std::max<int64_t>(1, short_passes ? longest / 64 : longest / (2 * int64_t(ks.wg)));
    splits = static_cast<uint32_t>(std::min<uint64_t>({want, most, 256}));
  }
  if (splits > 1) be->att_partial.at_least(be->context, uint64_t(n_tokens) * p->n_heads * splits * (v_dim + 2) * 4);
  // Decode on NVIDIA: the output's 15-bit form too (att_write), so that the output projection's dp4a
  // product needs no rounding launch — where every warp holds whole 32-column blocks; for one token,
  // or a batch's rows where the dp4a batch kernel reads them (batch_int15_by_producer).
  const uint64_t cols = uint64_t(p->n_heads) * v_dim;
  const bool warps_whole = ks.ptx && v_dim % 32 == 0 && ks.wg % 32 == 0 && ks.wide_wg % 32 == 0;
  const ProducedForms form = warps_whole ? produced_forms(be, n_tokens, cols) : ProducedForms{};
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
    const uint32_t k_area = static_cast<uint32_t>(k_query_area(geo)), v_area = static_cast<uint32_t>(v_acc_area(geo));
    const size_t image_bytes = (size_t(4) * ks.hpw * k_area + 15) / 16 * 16;  // float4s in the kernels (Q_IMAGE4)
    if (geo.k_fused) {
      // The query areas once per (token, work-group of heads); every key split copies its own.
      auto& qk = ks.fused_queries;
      qk.setArg(0, single(q));
      qk.setArg(1, be->att_q_images.at_least(be->context, uint64_t(image_bytes) * groups));
      qk.setArg(2, static_cast<cl_uint>(Ly.n_kv_heads));
      qk.setArg(3, cl::Local(image_bytes));
      qk.setArg(4, static_cast<cl_uint>(k_area));
      const uint32_t parts = ks.query_parts ? fused_query_parts(cu, groups, be->tuning.att_query_parts) : 1;
      launch(be, qk, cl::NDRange(size_t(ks.wide_wg) * p->n_heads / heads_per_group, n_tokens, parts),
             cl::NDRange(ks.wide_wg, 1, 1));
    }
    kn.setArg(22, cl::Local(image_bytes));
    kn.setArg(23, static_cast<cl_uint>(k_area));
    kn.setArg(24, cl::Local(size_t(4) * ks.hpw * v_area));
    kn.setArg(25, static_cast<cl_uint>(v_area));
    kn.setArg(26, geo.k_fused ? be->att_q_images.buffer : single(q));  // unused without fused keys
  }
  const cl_uint form_arg = fused ? 27 : 22;
  kn.setArg(form_arg, form ? *form.xq : single(out));  // unread without a form
  kn.setArg(form_arg + 1, form ? *form.blocks : single(out));
  kn.setArg(form_arg + 2, static_cast<cl_uint>(bool(form)));
  // The joined kv_write's rows and rope (attention_short_join's last arguments; half 0: no rope).
  const RopeLaunch* rope = join && join->rope.x ? &join->rope : nullptr;
  if (join) {
    kn.setArg(25, single(join->k));
    kn.setArg(26, single(join->v));
    kn.setArg(27, rope ? rope->table : be->d_positions);  // unread without a rope
    kn.setArg(28, static_cast<cl_uint>(rope ? rope->half : 0));
    kn.setArg(29, static_cast<cl_uint>(rope ? rope->style : 0));
  }
  launch(be, kn, cl::NDRange(size_t(wg) * p->n_heads / heads_per_group, n_tokens, splits), cl::NDRange(wg, 1, 1));
  if (splits > 1) {
    auto& mk = ks.merge;
    mk.setArg(0, be->att_partial.buffer);
    mk.setArg(1, single(out));
    mk.setArg(2, static_cast<cl_uint>(splits));
    mk.setArg(3, form ? *form.xq : single(out));
    mk.setArg(4, form ? *form.blocks : single(out));
    mk.setArg(5, static_cast<cl_uint>(bool(form)));
    mk.setArg(6, static_cast<cl_uint>(cols));
    // The splits rotated the joined query in registers only: the merge writes it back (attention.cl).
    mk.setArg(7, single(q));
    mk.setArg(8, be->d_positions);
    mk.setArg(9, rope ? rope->table : be->d_positions);  // unread without a rope
    mk.setArg(10, static_cast<cl_uint>(rope ? rope->half : 0));
    mk.setArg(11, static_cast<cl_uint>(rope ? rope->style : 0));
    launch(be, mk, cl::NDRange(size_t(ks.wide_wg) * n_tokens * p->n_heads), cl::NDRange(ks.wide_wg));  // MERGE_WG
  }
  form.made(forms, out);
}

sl_status checked_attention(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const AttentionParams* p,
                            sl_buffer* out, const KvJoin* join, Forms& forms, sl_error* err) {
  if (!p) return set_error(err, SL_ERR_INVALID_ARGUMENT, "attention: no parameters");
  if (layer >= c->layout.n_layers) return set_error(err, SL_ERR_INVALID_ARGUMENT, "attention: layer out of range");
  const KvLayerShape& Ly = c->layers[layer];
  if (!Ly.has_kv()) return set_error(err, SL_ERR_INVALID_ARGUMENT, "attention: layer " + std::to_string(layer) + " keeps no K/V");
  const uint32_t v_dim = p->v_head_dim ? p->v_head_dim : p->head_dim;
  if (p->n_kv_heads != Ly.n_kv_heads || p->head_dim != Ly.k_dim || v_dim != Ly.v_dim || p->n_kv_heads == 0 || p->n_heads % p->n_kv_heads)
    return set_error(err, SL_ERR_INVALID_ARGUMENT,
                     "attention: heads " + std::to_string(p->n_heads) + "/" + std::to_string(p->n_kv_heads) + ", K " +
                         std::to_string(p->head_dim) + ", V " + std::to_string(v_dim) + " do not match layer " + std::to_string(layer) +
                         " of the KV cache (" + std::to_string(Ly.n_kv_heads) + " KV heads, K " + std::to_string(Ly.k_dim) + ", V " +
                         std::to_string(Ly.v_dim) + ")");
  // A WINDOW layer keeps only its window's pages: a query must not reach further back.
  if (Ly.kind == SL_KV_WINDOW && (p->window == 0 || p->window > Ly.window))
    return set_error(err, SL_ERR_INVALID_ARGUMENT,
                     "attention: layer " + std::to_string(layer) + " keeps a window of " + std::to_string(Ly.window) +
                         " positions; the node's window is " + std::to_string(p->window));
  if (auto s = check_pages(be, c, layer, err); s != SL_OK) return s;
  const uint32_t n_tokens = static_cast<uint32_t>(be->positions.size());
  if (q->bytes < uint64_t(n_tokens) * p->n_heads * p->head_dim * 4 || out->bytes < uint64_t(n_tokens) * p->n_heads * v_dim * 4)
    return set_error(err, SL_ERR_INVALID_ARGUMENT, "attention: query/output buffers too small");
  return guarded(err, "attention", [&] {
    if (!c->on_device) {
      if (join)
        if (auto s = kv_write(be, c, layer, join->k, join->v, join->rope.x ? &join->rope : nullptr, err); s != SL_OK) return s;
      return host_attention(be, c, layer, q, p, out, err);
    }
    const uint32_t group = p->n_heads / p->n_kv_heads;
    auto& ks = cache_kernels(be, c->geometry(layer), group);
    // Prefill runs on tensor cores where they apply. The portable kernels below then run only if
    // some token is outside such a run — over the whole batch, as they are built, and before the
    // runs' kernels, which overwrite their tokens' rows.
    std::vector<QueryRun> mma_runs;
    uint32_t in_runs = 0;
    const uint32_t min_run = be->tuning.mma_att_min_run;
    if (n_tokens >= min_run && mma_attention_applies(be, c, layer, p))
      for (auto run : query_runs(be)) {
        if (run.n_tokens < min_run) continue;
        if (keeps_recent(be, c)) {
          const auto floor = mma_recent_floor(be->recent_table.data() + static_cast<std::size_t>(run.seq) * be->max_pages,
                                              c->layout.recent_window, c->layout.page_tokens, run.first_pos, run.n_tokens, p->window);
          if (!floor) continue;
          run.recent_floor = *floor;
        }
        mma_runs.push_back(run);
        in_runs += run.n_tokens;
      }
    // The kv_write asked to join (kKvAttention, kRopeKvAttention: the plan saw the graph's data flow)
    // runs in this launch where the batch is decode and attention_short takes it, and the rope
    // pair's first tensor is q with this attention's heads; otherwise first, as kv_write runs it.
    KvJoin w = join ? *join : KvJoin{};
    if (w.rope.x && !(rope_pair_fits(w.rope, w.k, w.v, Ly.n_kv_heads, Ly.k_dim) && w.rope.x == q && w.rope.n_heads == p->n_heads)) {
      if (auto s = kv_write(be, c, layer, w.k, w.v, &w.rope, err); s != SL_OK) return s;
      join = nullptr;
    }
    const bool joins = join && ks.short_join() && short_passes_max_keys(be) > 0 && be->one_token_per_sequence && mma_runs.empty() &&
                       takes_short_passes(be, ks, p);
    if (join && !joins)
      if (auto s = kv_write(be, c, layer, w.k, w.v, w.rope.x ? &w.rope : nullptr, err); s != SL_OK) return s;
    if (in_runs < n_tokens) portable_attention(be, c, layer, q, p, out, ks, joins ? &w : nullptr, forms);
    for (const auto& run : mma_runs) mma_attention_run(be, c, layer, q, p, out, ks, run);
    return SL_OK;
  });
}

}  // namespace

sl_status attention(sl_backend* be, sl_kv_cache* c, uint32_t layer, const sl_buffer* q, const AttentionParams* p, sl_buffer* out,
                    const KvJoin* join, Forms& forms, sl_error* err) {
  return checked_attention(be, c, layer, q, p, out, join, forms, err);
}

}  // namespace sluice::ocl
