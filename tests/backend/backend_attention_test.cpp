// The paged KV cache and attention: several sequences in one batch with their own page tables,
// positions across several pages, GQA, sliding window, soft-capping and sinks, with each built-in
// codec — against naive softmax attention over the same (codec-rounded) K and V.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "backend_fixture.h"
#include "plugin/builtin_codecs.h"

namespace sluice::test {
namespace {

constexpr uint32_t kPageTokens = 16;
constexpr uint32_t kPages = 16;
constexpr uint32_t kLayers = 2;

struct CodecChoice {
  const char* name;
  const sl_kvcodec_api* (*api)();
};
const CodecChoice kCodecs[] = {{"f32", builtin_f32_codec}, {"f16", builtin_f16_codec}};

// One codec instance per role, destroyed with the test.
class CodecPair {
 public:
  CodecPair(const sl_kvcodec_api* api, uint32_t head_dim) : api_(api) {
    sl_error err{};
    ok_ = api->create(head_dim, SL_KV_KEYS, "", &k_, &err) == SL_OK &&
          api->create(head_dim, SL_KV_VALUES, "", &v_, &err) == SL_OK;
  }
  ~CodecPair() {
    if (k_) api_->destroy(k_);
    if (v_) api_->destroy(v_);
  }
  CodecPair(const CodecPair&) = delete;
  CodecPair& operator=(const CodecPair&) = delete;
  bool ok() const { return ok_; }
  // What the cache will hold: the value after encode and decode.
  std::vector<float> stored(const std::vector<float>& values, uint32_t head_dim) const {
    sl_kv_format f{};
    f.struct_size = sizeof(f);
    api_->get_format(k_, &f);
    const uint32_t n = static_cast<uint32_t>(values.size() / head_dim);
    std::vector<std::byte> rows(static_cast<std::size_t>(n) * f.row_bytes);
    std::vector<float> out(values.size());
    sl_error err{};
    api_->encode(k_, values.data(), n, rows.data(), &err);
    api_->decode(k_, rows.data(), n, out.data(), &err);
    return out;
  }
  sl_kv_layout layout(uint32_t n_kv_heads, uint32_t head_dim) const {
    sl_kv_layout l{};
    l.struct_size = sizeof(l);
    l.n_layers = kLayers;
    l.n_kv_heads = n_kv_heads;
    l.head_dim = head_dim;
    l.page_tokens = kPageTokens;
    l.n_pages = kPages;
    l.k_api = api_;
    l.k_codec = k_;
    l.v_api = api_;
    l.v_codec = v_;
    return l;
  }

 private:
  const sl_kvcodec_api* api_;
  sl_kvcodec* k_ = nullptr;
  sl_kvcodec* v_ = nullptr;
  bool ok_ = false;
};

struct AttentionShape {
  uint32_t n_heads, n_kv_heads, head_dim;
  uint32_t window;
  float softcap;
  bool sinks;
};

std::string describe(const AttentionShape& s) {
  return "heads " + std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv_heads) + " dim " +
         std::to_string(s.head_dim) + " window " + std::to_string(s.window) + " softcap " +
         std::to_string(s.softcap) + (s.sinks ? " sinks" : "");
}

// A sequence's history on the host: K and V of every position as the cache stores them.
struct Sequence {
  uint32_t length;
  std::vector<int32_t> pages;       // its page table row
  std::vector<float> k, v;          // [length][n_kv_heads][head_dim], codec-rounded
  std::vector<float> k_raw, v_raw;  // as written
};

// Naive causal attention of one query head over a sequence's positions 0..pos (within the window).
std::vector<double> reference_attention(const AttentionShape& s, const Sequence& seq, int32_t pos, uint32_t head,
                                        const float* q, const std::vector<float>& sinks) {
  const uint32_t kvh = head / (s.n_heads / s.n_kv_heads);
  const int32_t lo = s.window ? std::max<int32_t>(0, pos - static_cast<int32_t>(s.window) + 1) : 0;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  std::vector<double> scores;
  double m = -INFINITY;
  for (int32_t j = lo; j <= pos; ++j) {
    double dot = 0;
    for (uint32_t d = 0; d < s.head_dim; ++d)
      dot += static_cast<double>(q[d]) * seq.k[(static_cast<std::size_t>(j) * s.n_kv_heads + kvh) * s.head_dim + d];
    double score = dot * scale;
    if (s.softcap > 0) score = std::tanh(score / s.softcap) * s.softcap;
    scores.push_back(score);
    m = std::max(m, score);
  }
  if (s.sinks) m = std::max(m, static_cast<double>(sinks[head]));
  double sum = s.sinks ? std::exp(sinks[head] - m) : 0.0;
  for (auto& x : scores) sum += (x = std::exp(x - m));
  std::vector<double> out(s.head_dim, 0.0);
  for (int32_t j = lo; j <= pos; ++j)
    for (uint32_t d = 0; d < s.head_dim; ++d)
      out[d] += scores[j - lo] / sum * seq.v[(static_cast<std::size_t>(j) * s.n_kv_heads + kvh) * s.head_dim + d];
  return out;
}

class KvCache {
 public:
  // The ops' kv_write takes K and V of the layout's width.
  KvCache(const sl_backend_api* api, sl_backend* be, const sl_kv_layout& layout, OpCalls& ops) : api_(api), be_(be) {
    status_ = api->kv_create(be, &layout, &cache_, &err_);
    ops.set_kv_layout(layout);
  }
  ~KvCache() {
    if (cache_) api_->kv_destroy(be_, cache_);
  }
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  sl_kv_cache* get() const { return cache_; }
  sl_status status() const { return status_; }
  const char* message() const { return err_.message; }

 private:
  const sl_backend_api* api_;
  sl_backend* be_;
  sl_kv_cache* cache_ = nullptr;
  sl_status status_;
  sl_error err_{};
};

class AttentionTest : public BackendOpsTest {
 protected:
  // Tokens of a batch: (sequence index, position).
  using Tokens = std::vector<std::pair<uint32_t, int32_t>>;

  void begin(const std::vector<Sequence>& seqs, const Tokens& tokens, uint32_t max_pages) {
    std::vector<int32_t> positions, slots, table(seqs.size() * max_pages, -1);
    for (const auto& [s, pos] : tokens) {
      slots.push_back(static_cast<int32_t>(s));
      positions.push_back(pos);
    }
    for (std::size_t s = 0; s < seqs.size(); ++s)
      std::copy(seqs[s].pages.begin(), seqs[s].pages.end(), table.begin() + s * max_pages);
    begin_batch(positions, slots, static_cast<uint32_t>(seqs.size()), max_pages, table);
  }

  // Writes the tokens' K and V (raw values) into `layer`.
  void write(const AttentionShape& s, KvCache& cache, uint32_t layer, const std::vector<Sequence>& seqs,
             const Tokens& tokens, bool negate = false) {
    const std::size_t row = static_cast<std::size_t>(s.n_kv_heads) * s.head_dim;
    std::vector<float> k, v;
    for (const auto& [si, pos] : tokens) {
      const auto& seq = seqs[si];
      for (std::size_t i = 0; i < row; ++i) {
        k.push_back((negate ? -1 : 1) * seq.k_raw[pos * row + i]);
        v.push_back((negate ? -1 : 1) * seq.v_raw[pos * row + i]);
      }
    }
    auto dk = upload(k), dv = upload(v);
    sl_error err{};
    ASSERT_EQ(ops().kv_write(cache.get(), layer, dk.get(), dv.get(), &err), SL_OK) << err.message;
  }

  // Runs attention for the tokens and compares each head with the reference.
  void check_attention(const AttentionShape& s, KvCache& cache, uint32_t layer, const std::vector<Sequence>& seqs,
                       const Tokens& tokens) {
    check_views(s, cache, layer, tokens, [&](std::size_t) -> const std::vector<Sequence>& { return seqs; });
  }

  // As check_attention, but token t is checked against its own view of the sequences (mixed_[t]).
  std::map<std::size_t, std::vector<Sequence>> mixed_;
  void check_attention_mixed(const AttentionShape& s, KvCache& cache, uint32_t layer, const Tokens& tokens) {
    check_views(s, cache, layer, tokens, [&](std::size_t t) -> const std::vector<Sequence>& { return mixed_.at(t); });
  }

  // Attention for the tokens; token t's heads against the reference over view(t)'s sequences.
  template <class View>
  void check_views(const AttentionShape& s, KvCache& cache, uint32_t layer, const Tokens& tokens, View view) {
    const std::size_t q_row = static_cast<std::size_t>(s.n_heads) * s.head_dim;
    const auto q = random(tokens.size() * q_row);
    const auto sinks = random(s.n_heads);
    auto dq = upload(q), dsinks = upload(sinks), out = zeros(q.size());
    sl_attention_params p{};
    p.struct_size = sizeof(p);
    p.n_heads = s.n_heads;
    p.n_kv_heads = s.n_kv_heads;
    p.head_dim = s.head_dim;
    p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
    p.window = s.window;
    p.softcap = s.softcap;
    sl_error err{};
    ASSERT_EQ(ops().attention(cache.get(), layer, dq.get(), &p, s.sinks ? dsinks.get() : nullptr, out.get(), &err), SL_OK) << err.message;
    const auto got = download(out, q.size());
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const auto& [si, pos] = tokens[t];
      for (uint32_t h = 0; h < s.n_heads; ++h) {
        const auto ref = reference_attention(s, view(t)[si], pos, h, q.data() + t * q_row + h * s.head_dim, sinks);
        for (uint32_t d = 0; d < s.head_dim; ++d)
          ASSERT_NEAR(got[t * q_row + h * s.head_dim + d], ref[d], 2e-5 * (1.0 + std::abs(ref[d])))
              << "token " << t << " (seq " << si << " pos " << pos << ") head " << h << " dim " << d;
      }
    }
  }

  // Sequences of the given lengths with random K/V and page tables drawn from a shuffled pool.
  std::vector<Sequence> make_sequences(const AttentionShape& s, const CodecPair& codecs,
                                       const std::vector<uint32_t>& lengths) {
    std::vector<int32_t> pool(kPages);
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng_);
    std::vector<Sequence> seqs;
    std::size_t next = 0;
    for (uint32_t length : lengths) {
      Sequence seq;
      seq.length = length;
      for (uint32_t p = 0; p < (length + kPageTokens - 1) / kPageTokens; ++p) seq.pages.push_back(pool[next++]);
      seq.k_raw = random(static_cast<std::size_t>(length) * s.n_kv_heads * s.head_dim);
      seq.v_raw = random(seq.k_raw.size());
      seq.k = codecs.stored(seq.k_raw, s.head_dim);
      seq.v = codecs.stored(seq.v_raw, s.head_dim);
      seqs.push_back(std::move(seq));
    }
    return seqs;
  }
};

const AttentionShape kShapes[] = {
    {4, 4, 16, 0, 0.0f, false},   // one query head per KV head
    {6, 2, 24, 0, 0.0f, false},   // GQA groups of 3, head_dim not a multiple of 16
    {8, 2, 72, 7, 0.0f, false},   // sliding window inside a page
    {4, 1, 20, 0, 1.5f, false},   // one KV head, soft-capped scores
    {6, 3, 16, 20, 0.0f, true},   // sinks, and a window that spans pages
};

// Interleaved sequences (runs of one token), their decode tokens, and one sequence's long runs.
TEST_P(AttentionTest, PrefillAndDecodeOfSeveralSequencesMatchNaiveAttention) {
  for (const auto& codec : kCodecs) {
    for (const auto& shape : kShapes) {
      SCOPED_TRACE(std::string(codec.name) + " " + describe(shape));
      CodecPair codecs(codec.api(), shape.head_dim);
      ASSERT_TRUE(codecs.ok());
      KvCache cache(api(), be(), codecs.layout(shape.n_kv_heads, shape.head_dim), ops());
      ASSERT_EQ(cache.status(), SL_OK) << cache.message();
      const auto seqs = make_sequences(shape, codecs, {37, 5, 50});
      const uint32_t max_pages = 4;

      // Prefill: every position but the last of each sequence, the sequences interleaved.
      Tokens prefill, decode;
      for (uint32_t pos = 0; pos < 50; ++pos)
        for (uint32_t s = 0; s < seqs.size(); ++s)
          if (pos + 1 < seqs[s].length) prefill.push_back({s, static_cast<int32_t>(pos)});
      for (uint32_t s = 0; s < seqs.size(); ++s) decode.push_back({s, static_cast<int32_t>(seqs[s].length - 1)});

      begin(seqs, prefill, max_pages);
      write(shape, cache, 0, seqs, prefill, /*negate=*/true);  // layer 0 holds other data
      write(shape, cache, 1, seqs, prefill);
      check_attention(shape, cache, 1, seqs, prefill);
      if (HasFatalFailure()) return;

      begin(seqs, decode, max_pages);
      write(shape, cache, 0, seqs, decode, /*negate=*/true);
      write(shape, cache, 1, seqs, decode);
      check_attention(shape, cache, 1, seqs, decode);
      if (HasFatalFailure()) return;

      // One sequence's long runs, as a prefill sends them, in a cache of their own: the first 150
      // positions in one batch (past one block of 128 queries on the CPU), then the next 49 after them
      // (queries whose keys start before their run).
      KvCache long_cache(api(), be(), codecs.layout(shape.n_kv_heads, shape.head_dim), ops());
      ASSERT_EQ(long_cache.status(), SL_OK) << long_cache.message();
      const auto long_seq = make_sequences(shape, codecs, {200});
      Tokens first, second;
      for (int32_t pos = 0; pos < 150; ++pos) first.push_back({0, pos});
      for (int32_t pos = 150; pos < 199; ++pos) second.push_back({0, pos});
      for (const Tokens* run : {&first, &second}) {
        begin(long_seq, *run, 13);
        write(shape, long_cache, 1, long_seq, *run);
        check_attention(shape, long_cache, 1, long_seq, *run);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST_P(AttentionTest, CopiedPagesServeAttentionLikeTheOriginals) {
  const AttentionShape shape{4, 2, 16, 0, 0.0f, false};
  CodecPair codecs(builtin_f16_codec(), shape.head_dim);
  KvCache cache(api(), be(), codecs.layout(shape.n_kv_heads, shape.head_dim), ops());
  ASSERT_EQ(cache.status(), SL_OK) << cache.message();
  auto seqs = make_sequences(shape, codecs, {20});
  seqs[0].pages = {3, 9};
  Tokens all;
  for (int32_t pos = 0; pos < 20; ++pos) all.push_back({0, pos});
  begin(seqs, all, 2);
  write(shape, cache, 0, seqs, all);
  write(shape, cache, 1, seqs, all);

  sl_error err{};
  ASSERT_EQ(api()->kv_copy_page(be(), cache.get(), 3, 12, &err), SL_OK) << err.message;
  ASSERT_EQ(api()->kv_copy_page(be(), cache.get(), 9, 0, &err), SL_OK) << err.message;
  seqs[0].pages = {12, 0};
  const Tokens last = {{0, 19}, {0, 7}};
  begin(seqs, last, 2);
  check_attention(shape, cache, 0, seqs, last);  // every layer is copied
  check_attention(shape, cache, 1, seqs, last);
}

TEST_P(AttentionTest, CopyingAPageOutOfRangeIsAnError) {
  CodecPair codecs(builtin_f32_codec(), 8);
  KvCache cache(api(), be(), codecs.layout(1, 8), ops());
  ASSERT_EQ(cache.status(), SL_OK);
  for (auto [src, dst] : {std::pair{kPages, 0u}, {0u, kPages}}) {
    sl_error err{};
    EXPECT_EQ(api()->kv_copy_page(be(), cache.get(), src, dst, &err), SL_ERR_INVALID_ARGUMENT);
    EXPECT_STRNE(err.message, "");
  }
}

TEST_P(AttentionTest, IncompleteLayoutIsRefused) {
  CodecPair codecs(builtin_f32_codec(), 8);
  auto layout = codecs.layout(1, 8);
  layout.page_tokens = 0;
  sl_kv_cache* cache = nullptr;
  sl_error err{};
  EXPECT_EQ(api()->kv_create(be(), &layout, &cache, &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(err.message, "");
  layout = codecs.layout(1, 8);
  layout.v_codec = nullptr;
  EXPECT_EQ(api()->kv_create(be(), &layout, &cache, &err), SL_ERR_INVALID_ARGUMENT);
  layout = codecs.layout(1, 8);
  layout.n_kv_heads = 0;
  EXPECT_EQ(api()->kv_create(be(), &layout, &cache, &err), SL_ERR_INVALID_ARGUMENT);
  // Codecs made for 8 values a row under a layout of 16: rows would be written past their ends.
  layout = codecs.layout(1, 8);
  layout.head_dim = 16;
  err = sl_error{};
  EXPECT_EQ(api()->kv_create(be(), &layout, &cache, &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("head_dim is 16"), std::string::npos) << err.message;
  EXPECT_EQ(cache, nullptr);
}

TEST_P(AttentionTest, BadBatchesAreRefused) {
  const std::vector<int32_t> table = {0};
  auto try_batch = [&](std::vector<int32_t> positions, std::vector<int32_t> slots) {
    sl_batch b{};
    b.struct_size = sizeof(b);
    b.n_tokens = static_cast<uint32_t>(positions.size());
    b.positions = positions.data();
    b.seq_slots = slots.data();
    b.n_seqs = 1;
    b.max_pages = 1;
    b.page_table = table.data();
    sl_error err{};
    sl_graph empty{};
    empty.struct_size = sizeof(empty);
    sl_step step{};
    step.struct_size = sizeof(step);
    step.batch = &b;
    const auto status = api()->graph_compute(be(), &empty, &step, &err);
    EXPECT_STRNE(err.message, "");
    return status;
  };
  EXPECT_EQ(try_batch({}, {}), SL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(try_batch({0, 1}, {0, 1}), SL_ERR_INVALID_ARGUMENT);   // slot 1 of 1 sequence
  EXPECT_EQ(try_batch({0, -1}, {0, 0}), SL_ERR_INVALID_ARGUMENT);  // negative position
}

TEST_P(AttentionTest, WritesAndAttentionOutsideTheCacheAreErrors) {
  const AttentionShape shape{4, 2, 8, 0, 0.0f, false};
  CodecPair codecs(builtin_f32_codec(), shape.head_dim);
  KvCache cache(api(), be(), codecs.layout(shape.n_kv_heads, shape.head_dim), ops());
  ASSERT_EQ(cache.status(), SL_OK);
  auto kv = zeros(2 * 2 * 8), q = zeros(2 * 4 * 8), out = zeros(2 * 4 * 8);
  sl_attention_params p{};
  p.struct_size = sizeof(p);
  p.n_heads = 4;
  p.n_kv_heads = 2;
  p.head_dim = 8;
  p.scale = 0.35f;
  sl_error err{};

  begin_batch({0, 1}, {0, 0}, 1, 1, {0});
  EXPECT_EQ(ops().kv_write(cache.get(), kLayers, kv.get(), kv.get(), &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ops().attention(cache.get(), kLayers, q.get(), &p, nullptr, out.get(), &err), SL_ERR_INVALID_ARGUMENT);
  auto bad = p;
  bad.n_heads = 5;  // not a multiple of the KV heads
  EXPECT_EQ(ops().attention(cache.get(), 0, q.get(), &bad, nullptr, out.get(), &err), SL_ERR_INVALID_ARGUMENT);
  bad = p;
  bad.head_dim = 16;  // not the cache's
  EXPECT_EQ(ops().attention(cache.get(), 0, q.get(), &bad, nullptr, out.get(), &err), SL_ERR_INVALID_ARGUMENT);

  begin_batch({0, 1}, {0, 0}, 1, 1, {static_cast<int32_t>(kPages)});  // page out of range
  err = {};
  EXPECT_EQ(ops().kv_write(cache.get(), 0, kv.get(), kv.get(), &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(err.message, "");
  EXPECT_EQ(ops().attention(cache.get(), 0, q.get(), &p, nullptr, out.get(), &err), SL_ERR_INVALID_ARGUMENT);

  begin_batch({0, static_cast<int32_t>(kPageTokens)}, {0, 0}, 1, 1, {0});  // position past the page table
  err = {};
  EXPECT_EQ(ops().kv_write(cache.get(), 0, kv.get(), kv.get(), &err), SL_ERR_INVALID_ARGUMENT);
  EXPECT_STRNE(err.message, "");
}

// ---- the recent window -----------------------------------------------------------------------

// A deliberately coarse codec (steps of 1/4, int8) with host and OpenCL halves, so that a key read
// from the codec's row and the same key read exactly differ visibly.
namespace coarse {
struct Codec {
  uint32_t head_dim;
};
int8_t quantize(float v) { return static_cast<int8_t>(std::clamp(std::nearbyint(v * 4.0f), -127.0f, 127.0f)); }
sl_status create(uint32_t head_dim, sl_kv_role, const char*, sl_kvcodec** out, sl_error*) {
  *out = reinterpret_cast<sl_kvcodec*>(new Codec{head_dim});
  return SL_OK;
}
void destroy(sl_kvcodec* c) { delete reinterpret_cast<Codec*>(c); }
void get_format(const sl_kvcodec* c, sl_kv_format* f) {
  const uint32_t d = reinterpret_cast<const Codec*>(c)->head_dim;
  *f = {sizeof(sl_kv_format), SL_ABI_VERSION, d, d, d, d, 8.0f, d};
}
sl_status encode(const sl_kvcodec* c, const float* src, uint32_t n, void* dst, sl_error*) {
  const uint32_t d = reinterpret_cast<const Codec*>(c)->head_dim;
  for (std::size_t i = 0; i < std::size_t(n) * d; ++i) static_cast<int8_t*>(dst)[i] = quantize(src[i]);
  return SL_OK;
}
sl_status decode(const sl_kvcodec* c, const void* src, uint32_t n, float* dst, sl_error*) {
  const uint32_t d = reinterpret_cast<const Codec*>(c)->head_dim;
  for (std::size_t i = 0; i < std::size_t(n) * d; ++i) dst[i] = static_cast<const int8_t*>(src)[i] * 0.25f;
  return SL_OK;
}
const char* opencl_source(const sl_kvcodec*) {
  return "void SL_KV_FN(encode_row)(__global const float* src, __global uchar* row, uint n) {\n"
         "  for (uint i = 0; i < n; ++i) row[i] = (uchar)(char)clamp(rint(src[i] * 4.0f), -127.0f, 127.0f);\n"
         "}\n"
         "float SL_KV_FN(load)(__global const uchar* row, uint i) { return (float)(char)row[i] * 0.25f; }\n";
}
const sl_kvcodec_api kApi = {sizeof(sl_kvcodec_api), SL_ABI_VERSION, create, destroy, get_format, encode, decode,
                             nullptr, nullptr, nullptr, nullptr, nullptr, opencl_source};
}  // namespace coarse

// The recent window as the ABI defines it: key j of a query at pos is exact when j > pos - window
// and the pages from j's to pos's all have recent pages. Written out independently of the backends.
int32_t reference_exact_from(const std::vector<int32_t>& recent, uint32_t window, int32_t pos, int32_t lo) {
  int32_t from = pos + 1;
  for (int32_t j = pos; j >= std::max(lo, pos - static_cast<int32_t>(window) + 1); --j) {
    if (recent[static_cast<std::size_t>(j) / kPageTokens] < 0) break;
    from = j;
  }
  return from;
}

TEST_P(AttentionTest, RecentWindowKeysAreReadExactly) {
  if (!backend().has_cap(SL_CAP_KV_RECENT_WINDOW)) GTEST_SKIP() << "backend keeps no recent window";
  for (uint32_t window : {5u, 20u}) {
    for (const AttentionShape& shape : {AttentionShape{4, 2, 24, 0, 0.0f, false}, AttentionShape{6, 3, 16, 9, 0.0f, true}}) {
      SCOPED_TRACE("window " + std::to_string(window) + " " + describe(shape));
      CodecPair codecs(&coarse::kApi, shape.head_dim);
      ASSERT_TRUE(codecs.ok());
      auto layout = codecs.layout(shape.n_kv_heads, shape.head_dim);
      layout.recent_window = window;
      layout.n_recent_pages = 8;
      KvCache cache(api(), be(), layout, ops());
      ASSERT_EQ(cache.status(), SL_OK) << cache.message();
      auto seqs = make_sequences(shape, codecs, {50, 37});
      // Sequence 0's first page has no recent page (a reused prefix: compressed only), the others do.
      const std::vector<std::vector<int32_t>> recent = {{-1, 3, 0, 6}, {5, 1, 7}};
      const uint32_t max_pages = 4;
      std::vector<int32_t> recent_table(seqs.size() * max_pages, -1);
      for (std::size_t s = 0; s < seqs.size(); ++s) std::copy(recent[s].begin(), recent[s].end(), recent_table.begin() + s * max_pages);
      // What each query must see: the codec's values, except its window's keys (f16-rounded originals).
      auto exact_seq = [&](const Sequence& seq, std::size_t si, int32_t pos) {
        Sequence mixed = seq;
        const int32_t lo = shape.window ? std::max<int32_t>(0, pos - static_cast<int32_t>(shape.window) + 1) : 0;
        const std::size_t row = static_cast<std::size_t>(shape.n_kv_heads) * shape.head_dim;
        for (int32_t j = reference_exact_from(recent[si], window, pos, lo); j <= pos; ++j)
          for (std::size_t i = 0; i < row; ++i) {
            mixed.k[j * row + i] = round_to_dtype(seq.k_raw[j * row + i], SL_DTYPE_F16);
            mixed.v[j * row + i] = round_to_dtype(seq.v_raw[j * row + i], SL_DTYPE_F16);
          }
        return mixed;
      };
      auto run = [&](const Tokens& tokens) {
        std::vector<int32_t> positions, slots, table(seqs.size() * max_pages, -1);
        for (const auto& [si, pos] : tokens) {
          slots.push_back(static_cast<int32_t>(si));
          positions.push_back(pos);
        }
        for (std::size_t si = 0; si < seqs.size(); ++si) std::copy(seqs[si].pages.begin(), seqs[si].pages.end(), table.begin() + si * max_pages);
        sl_batch b{};
        b.struct_size = sizeof(b);
        b.n_tokens = static_cast<uint32_t>(positions.size());
        b.positions = positions.data();
        b.seq_slots = slots.data();
        b.n_seqs = static_cast<uint32_t>(seqs.size());
        b.max_pages = max_pages;
        b.page_table = table.data();
        b.recent_table = recent_table.data();
        sl_error err{};
        ASSERT_EQ(ops().begin_batch(&b, &err), SL_OK) << err.message;
        write(shape, cache, 1, seqs, tokens);
        // One query at a time against its own mixed history (check_attention runs them all at once,
        // each token checked against the reference of its own sequence).
        for (std::size_t t = 0; t < tokens.size(); ++t) {
          std::vector<Sequence> view = seqs;
          view[tokens[t].first] = exact_seq(seqs[tokens[t].first], tokens[t].first, tokens[t].second);
          mixed_[t] = std::move(view);
        }
      };
      Tokens prefill, decode;
      for (uint32_t pos = 0; pos < 50; ++pos)
        for (uint32_t si = 0; si < seqs.size(); ++si)
          if (pos + 1 < seqs[si].length) prefill.push_back({si, static_cast<int32_t>(pos)});
      for (uint32_t si = 0; si < seqs.size(); ++si) decode.push_back({si, static_cast<int32_t>(seqs[si].length - 1)});
      for (const Tokens* tokens : {&prefill, &decode}) {
        mixed_.clear();
        run(*tokens);
        if (HasFatalFailure()) return;
        check_attention_mixed(shape, cache, 1, *tokens);
        if (HasFatalFailure()) return;
      }
      // A sequence written alone runs in one long run (the CPU's blocked GEMM path).
      Tokens long_run;
      for (int32_t pos = 0; pos < 49; ++pos) long_run.push_back({0, pos});
      mixed_.clear();
      run(long_run);
      if (HasFatalFailure()) return;
      check_attention_mixed(shape, cache, 1, long_run);
      if (HasFatalFailure()) return;
    }
  }
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(Backend, AttentionTest, ::testing::ValuesIn(backends_under_test()), backend_test_name);

}  // namespace sluice::test
