// The KV cache's per-layer pools on the host (core/engine/kv_cache.h), with the CPU backend:
// - sliding-window layers keep only their window's pages: pages go back as a sequence grows, the
//   pool and the engine's memory accounting count them apart from the full layers' per-token bytes,
//   and the engine's output is exactly the output with every position kept — alone, side by side,
//   and reusing a cached prefix (whose window pages come from the prefix cache too);
// - recurrent layers' state (a hybrid toy layout, its "recurrence" written by graph nodes through
//   STATE tensors): a state slot per sequence, cleared on its first pass, snapshotted at block ends
//   and restored by prefix reuse at the longest boundary whose snapshot the cache still holds;
// - a real hybrid (Qwen3.5: Gated DeltaNet layers and full attention): a conversation's next turn
//   reuses its prefix (the recurrent layers' state from a snapshot) and gives what computing it gives;
// - a model with linear-attention layers is refused by a family that does not build them.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "engine/runtime.h"
#include "graph/step_graph.h"
#include "model/model_config.h"
#include "model/transformer.h"
#include "plugin/plugin_registry.h"
#include "quant/model_info.h"
#include "choice_results.h"
#include "reference.h"

namespace sluice {
namespace {

// A copy of the tiny trained model whose config.json the test rewrites (the weights and tokenizer
// linked, not copied), removed afterwards.
class ModelCopy {
 public:
  explicit ModelCopy(const std::string& config_json) {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() / ("sluice_kv_layers_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(dir_);
    const auto src = test::source_path("models/tiny-code-qwen2");
    for (const auto& entry : std::filesystem::directory_iterator(src))
      if (entry.path().filename() != "config.json") std::filesystem::create_symlink(entry.path(), dir_ / entry.path().filename());
    std::ofstream(dir_ / "config.json") << config_json;
  }
  ~ModelCopy() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

// The tiny model's config.json with extra members (replacing the ones it names).
std::string tiny_config(const std::string& layer_types, const std::string& window) {
  return R"({"architectures":["Qwen2ForCausalLM"],"bos_token_id":null,"eos_token_id":2,"hidden_act":"silu","hidden_size":384,)"
         R"("intermediate_size":1024,"max_position_embeddings":4096,"max_window_layers":28,"model_type":"qwen2",)"
         R"("num_attention_heads":6,"num_hidden_layers":4,"num_key_value_heads":2,"rms_norm_eps":1e-06,)"
         R"("rope_parameters":{"rope_theta":10000.0,"rope_type":"default"},"tie_word_embeddings":true,"vocab_size":8192,)"
         R"("layer_types":)" + layer_types + R"(,"sliding_window":)" + window + R"(,"use_sliding_window":true})";
}
const char* kSlidingFull = R"(["sliding_attention","full_attention","sliding_attention","full_attention"])";

EngineOptions options(const std::string& model_dir, int parallel = 1, bool window_pages = true) {
  EngineOptions o;
  o.model_dir = model_dir;
  o.plugin_dir = test::binary_path("lib").string();
  o.backend = "cpu";
  o.threads = 2;
  o.ctx_size = 512;
  o.parallel = parallel;
  o.prefill_size = 32;
  o.kv_window_pages = window_pages;
  return o;
}

GenerationRequest greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest r;
  r.prompt_ids = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

std::vector<int32_t> prompt_of(int seed, int n) {
  std::vector<int32_t> p;
  for (int j = 0; j < n; ++j) p.push_back(300 + (seed * 613 + j * 97) % 6000);
  return p;
}

TEST(KvLayers, SlidingWindowLayersHoldOnlyTheirWindowsPages) {
  const ModelCopy model(tiny_config(kSlidingFull, "24"));
  auto rt = Runtime::open(options(model.dir(), 2));
  ASSERT_TRUE(rt.ok()) << rt.message();
  KvCache& kv = (*rt)->kv();
  EXPECT_EQ(kv.layer_kind(0), uint32_t(SL_KV_WINDOW));
  EXPECT_EQ(kv.layer_kind(1), uint32_t(SL_KV_FULL));
  EXPECT_EQ(kv.window(), 24u);
  // Per token: the two full layers' K and V (2 KV heads × 64 values × 2 bytes, f16); a window page:
  // the two sliding layers' 16 positions of the same.
  EXPECT_DOUBLE_EQ(kv.bytes_per_token(), 2.0 * 2 * 64 * 2 * 2);
  EXPECT_EQ(kv.window_page_bytes(), 16u * 2 * 2 * 64 * 2 * 2);
  ASSERT_NE(kv.window_pool(), nullptr);
  const PagePool& pool = *kv.window_pool();

  // A sequence grows a token at a time (as decode): its window pages are the blocks a query at
  // n_past still reads — those from (n_past - 24 + 1) / 16 on — and the pool holds no more.
  SequenceKv seq;
  std::vector<int32_t> tokens;
  for (int32_t n = 0; n < 300; ++n) {
    tokens.push_back(100 + n);
    ASSERT_TRUE(kv.reserve(seq, n + 1).ok());
    seq.n_past = n + 1;
    ASSERT_TRUE(kv.passed(seq, seq.n_past).ok());
    kv.publish(seq, tokens);
    const int32_t first = std::max(0, seq.n_past - 24 + 1) / 16;
    for (std::size_t b = 0; b < seq.window_pages.size(); ++b)
      EXPECT_EQ(seq.window_pages[b] >= 0, static_cast<int32_t>(b) >= first) << "block " << b << " at " << seq.n_past;
  }
  EXPECT_EQ(seq.pages.size(), (300u + 15) / 16);  // the full layers keep every block
  EXPECT_LE(pool.pages_in_use(), kv.window_pages_per_sequence());
  // Published blocks stay cached (evictable) once the sequence lets them go; the rest are free.
  kv.release(seq);
  EXPECT_EQ(pool.pages_in_use(), 0u);
  EXPECT_GT(pool.cached_pages(), 0u);
  // A prefill chunk holds the pages its queries' windows reach, and gives back what the next
  // query does not.
  SequenceKv chunked;
  std::vector<int32_t> more(200, 7);
  ASSERT_TRUE(kv.reserve(chunked, 100).ok());
  for (std::size_t b = 0; b < chunked.window_pages.size(); ++b) EXPECT_GE(chunked.window_pages[b], 0) << b;
  chunked.n_past = 100;
  ASSERT_TRUE(kv.passed(chunked, 100).ok());
  kv.publish(chunked, more);
  EXPECT_EQ(chunked.window_pages[3], -1);  // positions 48..63: below 100 - 24 + 1
  EXPECT_GE(chunked.window_pages[4], 0);   // 64..79 holds 77..79
  kv.release(chunked);
  EXPECT_EQ(pool.pages_in_use(), 0u);  // only evictable cached pages remain
}

TEST(KvLayers, InfoCountsSlidingWindowLayersPerSequence) {
  const ModelCopy model(tiny_config(kSlidingFull, "24"));
  auto info = quant::inspect_model(model.dir(), nullptr);
  ASSERT_TRUE(info.ok()) << info.message();
  EXPECT_EQ(info->sliding_layers, 2);
  EXPECT_EQ(info->window, 24);
  ASSERT_GE(info->kv.size(), 2u);
  EXPECT_EQ(info->kv[1].name, "f16");
  // Per token: the 2 full layers (2 KV heads × 64 values, K and V, 2 bytes); per sequence: the 2
  // sliding layers' pages of a window of 24 as the cache holds them ((2 + 2) pages of 16).
  EXPECT_EQ(info->kv[1].bytes_per_token, 2u * 2 * 64 * 2 * 2);
  EXPECT_EQ(info->kv[1].window_bytes_per_sequence, 2u * 2 * 64 * 2 * 2 * 64);
}

TEST(KvLayers, EngineWithWindowPagesEqualsKeepingEveryPosition) {
  const ModelCopy model(tiny_config(kSlidingFull, "24"));
  auto released = Engine::create(options(model.dir(), 3, true));
  auto kept = Engine::create(options(model.dir(), 3, false));
  ASSERT_TRUE(released.ok()) << released.message();
  ASSERT_TRUE(kept.ok()) << kept.message();
  const EngineMetrics rm = (*released)->metrics(), km = (*kept)->metrics();
  EXPECT_DOUBLE_EQ(km.kv_bytes_per_token, 2 * rm.kv_bytes_per_token);  // every layer per token, or the full half
  EXPECT_GT(rm.kv_window_pages_total, 0u);
  EXPECT_EQ(km.kv_window_pages_total, 0u);
  EXPECT_GT(rm.kv_window_bytes_per_sequence, 0u);
  EXPECT_LT(rm.kv_bytes_capacity, km.kv_bytes_capacity);

  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 3; ++i) requests.push_back(greedy(prompt_of(i, 20 + 41 * i), 40));
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : requests) {
    const auto g = (*kept)->generate(r);
    ASSERT_EQ(g.finish, FinishReason::kLength) << g.error;
    want.push_back(g.ids);
  }
  // The window is in effect: the model without it answers the longest prompt otherwise.
  auto unwindowed = Engine::create(options(test::source_path("models/tiny-code-qwen2").string()));
  ASSERT_TRUE(unwindowed.ok()) << unwindowed.message();
  EXPECT_NE((*unwindowed)->generate(requests[2]).ids, want[2]);
  // Side by side (the three in one batch), and with the window's pages released as they go.
  std::vector<std::future<GenerationResult>> futures;
  for (const auto& r : requests) futures.push_back(std::async(std::launch::async, [&, r] { return (*released)->generate(r); }));
  for (std::size_t i = 0; i < futures.size(); ++i) {
    const auto got = futures[i].get();
    EXPECT_EQ(got.finish, FinishReason::kLength) << got.error;
    EXPECT_EQ(got.ids, want[i]) << "request " << i;
  }
  for (int i = 0; i < 100 && (*released)->metrics().active_sequences != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const EngineMetrics idle = (*released)->metrics();
  EXPECT_EQ(idle.kv_pages_in_use, 0u);
  EXPECT_EQ(idle.kv_window_pages_in_use, 0u);  // cached window pages are evictable, none held
}

TEST(KvLayers, WindowPagesBesideACompressingCodecsRecentWindow) {
  // q8 keeps the newest 16 keys exact in recent pages (per layer, window layers too): the same tokens
  // whether the window layers' pages are released or kept.
  const ModelCopy model(tiny_config(kSlidingFull, "40"));
  auto o = options(model.dir(), 2, true);
  o.kv_codec = "q8";
  auto released = Engine::create(o);
  o.kv_window_pages = false;
  auto kept = Engine::create(o);
  ASSERT_TRUE(released.ok()) << released.message();
  ASSERT_TRUE(kept.ok()) << kept.message();
  ASSERT_EQ((*released)->metrics().kv_recent_window, 16u);
  for (int i = 0; i < 2; ++i) {
    const auto request = greedy(prompt_of(7 + i, 30 + 50 * i), 30);
    const auto r = (*released)->generate(request), k = (*kept)->generate(request);
    EXPECT_EQ(r.finish, FinishReason::kLength) << r.error;
    EXPECT_EQ(r.ids, k.ids) << "request " << i;
  }
}

TEST(KvLayers, APrefixReusedWithItsWindowPagesGivesWhatComputingItGives) {
  const ModelCopy model(tiny_config(kSlidingFull, "24"));
  auto warm = Engine::create(options(model.dir()));
  auto cold = Engine::create(options(model.dir()));
  ASSERT_TRUE(warm.ok() && cold.ok());
  const auto first = prompt_of(2, 102);
  ASSERT_EQ((*warm)->generate(greedy(first, 1)).ids.size(), 1u);
  // The first 90 tokens shared: blocks 0-4 (80 tokens) reused, the window's pages of blocks 3 and 4
  // (positions from 80 - 24 + 1) from the prefix cache with them.
  auto shared = first;
  shared.resize(90);
  for (int j = 0; j < 13; ++j) shared.push_back(4000 + j);
  const auto reused = (*warm)->generate(greedy(shared, 24));
  const auto fresh = (*cold)->generate(greedy(shared, 24));
  EXPECT_EQ(reused.stats.cached_tokens, 80);
  EXPECT_EQ(fresh.stats.cached_tokens, 0);
  EXPECT_EQ(reused.ids, fresh.ids);
}

TEST(KvLayers, GemmaSlidingLayersReleaseTheirPagesAndReuseAPrefixExactly) {
  // Gemma 2 (zoo: window 8, sliding and full layers alternating): its sliding layer keeps window
  // pages, and a second request sharing 60 tokens gives, from the cached prefix, what computing it gives.
  SLUICE_REQUIRE_REFERENCE("models/zoo/gemma2/config.json");
  const std::string dir = test::reference_path("models/zoo/gemma2").string();
  auto rt = Runtime::open(options(dir));
  ASSERT_TRUE(rt.ok()) << rt.message();
  EXPECT_EQ((*rt)->kv().layer_kind(0), uint32_t(SL_KV_WINDOW));
  EXPECT_EQ((*rt)->kv().layer_kind(1), uint32_t(SL_KV_FULL));
  auto warm = Engine::create(options(dir));
  auto cold = Engine::create(options(dir));
  auto full = Engine::create(options(dir, 1, false));
  ASSERT_TRUE(warm.ok() && cold.ok() && full.ok());
  const auto first = prompt_of(3, 70);
  ASSERT_EQ((*warm)->generate(greedy(first, 1)).ids.size(), 1u);
  auto shared = first;
  shared.resize(60);
  for (int j = 0; j < 9; ++j) shared.push_back(500 + j);
  const auto reused = (*warm)->generate(greedy(shared, 20));
  const auto fresh = (*cold)->generate(greedy(shared, 20));
  const auto kept = (*full)->generate(greedy(shared, 20));
  EXPECT_GT(reused.stats.cached_tokens, 0);
  EXPECT_EQ(fresh.stats.cached_tokens, 0);
  EXPECT_EQ(reused.ids, fresh.ids);
  EXPECT_EQ(kept.ids, fresh.ids);
}

TEST(KvLayers, GreedyDecodingAheadKeepsTheWindowsPagesInStep) {
  // Decoding a token ahead advances the window's pages at issue and publishes at take: the same
  // tokens as reading every step's logits.
  const ModelCopy model(tiny_config(kSlidingFull, "24"));
  auto o = options(model.dir());
  o.decode_ahead = "on";
  auto ahead = Engine::create(o);
  o.decode_ahead = "off";
  auto plain = Engine::create(o);
  ASSERT_TRUE(ahead.ok()) << ahead.message();
  ASSERT_TRUE(plain.ok()) << plain.message();
  const auto request = greedy(prompt_of(5, 37), 60);
  const auto a = (*ahead)->generate(request), p = (*plain)->generate(request);
  EXPECT_EQ(a.finish, FinishReason::kLength) << a.error;
  EXPECT_EQ(a.ids, p.ids);
  for (int i = 0; i < 100 && (*ahead)->metrics().active_sequences != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ((*ahead)->metrics().kv_window_pages_in_use, 0u);
}

// --- recurrent state ---------------------------------------------------------------------------

// A hybrid toy layout: the tiny model's shape with layers 1 and 3 recurrent, 8 floats of state each.
ModelConfig hybrid_config() {
  auto c = ModelConfig::load(test::source_path("models/tiny-code-qwen2"));
  EXPECT_TRUE(c.ok()) << c.message();
  ModelConfig m = *c;
  m.layer_types = {LayerType::kFullAttention, LayerType::kLinearAttention, LayerType::kFullAttention, LayerType::kLinearAttention};
  m.linear_state_bytes = 32;
  return m;
}

class HybridState : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto& rec = registry_.load_file(test::binary_path("lib/sluice-backend-cpu.so"));
    ASSERT_TRUE(rec.loaded) << rec.status;
    auto be = BackendHandle::open(static_cast<const sl_backend_api*>(rec.descriptor->api), "cpu", "", 2);
    ASSERT_TRUE(be.ok()) << be.message();
    backend_ = std::move(*be);
    auto codecs = KvCodecChoice::parse("f16");
    ASSERT_TRUE(codecs.ok());
    KvPoolSpec pools;
    pools.max_sequences = 2;
    pools.state_snapshots = 4;
    auto kv = KvCache::create(*backend_, registry_, config_, *codecs, 1024, pools);
    ASSERT_TRUE(kv.ok()) << kv.message();
    kv_ = std::move(*kv);
    auto buf = backend_->alloc(2 * 8 * 4);
    ASSERT_TRUE(buf.ok());
    scratch_ = std::move(*buf);
  }
  void TearDown() override {
    scratch_ = Buffer();
    kv_.reset();
    backend_.reset();
  }

  // A graph with the batch's tables of one sequence (COPY nodes only: no position is written).
  Status run(SequenceKv& seq, const std::function<void(StepGraph&)>& nodes) {
    ForwardBatch tables;
    const SequenceKv* one[] = {&seq};
    kv_->fill_batch(one, tables);
    const int32_t position = std::max(0, seq.n_past - 1), slot = 0;
    sl_batch b{};
    b.struct_size = sizeof(b);
    b.n_tokens = 1;
    b.positions = &position;
    b.seq_slots = &slot;
    b.n_seqs = 1;
    b.max_pages = tables.max_pages;
    b.page_table = tables.page_table.data();
    b.state_slots = tables.state_slots.data();
    StepGraph g;
    nodes(g);
    sl_step step{};
    step.struct_size = sizeof(step);
    step.batch = &b;
    step.cache = kv_->raw();
    return backend_->compute(g.view(), step);
  }
  // The state of both recurrent layers (8 floats each), through COPY nodes.
  std::vector<float> read_state(SequenceKv& seq) {
    EXPECT_TRUE(run(seq, [&](StepGraph& g) {
                  g.copy(g.state(1, 1, 8), g.buffer(scratch_.get(), 1, 8), "read layer 1");
                  g.copy(g.state(3, 1, 8), g.buffer(scratch_.get(), 1, 8, SL_DTYPE_F32, 32), "read layer 3");
                }).ok());
    std::vector<float> s(16);
    EXPECT_TRUE(backend_->download(scratch_, 0, s.data(), 64).ok());
    return s;
  }
  // The toy recurrence: each token moves every state value — a function of the whole prefix.
  static void step_state(std::vector<float>& s, int32_t token) {
    for (std::size_t j = 0; j < s.size(); ++j) s[j] = 0.5f * s[j] + static_cast<float>(token % 97) * static_cast<float>(j + 1) / 64.0f;
  }
  static std::vector<float> state_after(const std::vector<int32_t>& tokens, std::size_t n) {
    std::vector<float> s(16, 0.0f);
    for (std::size_t i = 0; i < n; ++i) step_state(s, tokens[i]);
    return s;
  }
  // One pass over tokens [n_past, n_end) as the engine makes it: pages and a state slot reserved,
  // the state read, advanced and written back by graph nodes, then snapshot and publish.
  void pass(SequenceKv& seq, const std::vector<int32_t>& tokens, int32_t n_end) {
    ASSERT_TRUE(kv_->reserve(seq, n_end).ok());
    auto s = read_state(seq);
    for (int32_t i = seq.n_past; i < n_end; ++i) step_state(s, tokens[static_cast<std::size_t>(i)]);
    ASSERT_TRUE(backend_->upload(scratch_, 0, s.data(), 64).ok());
    ASSERT_TRUE(run(seq, [&](StepGraph& g) {
                  g.copy(g.buffer(scratch_.get(), 1, 8), g.state(1, 1, 8), "write layer 1");
                  g.copy(g.buffer(scratch_.get(), 1, 8, SL_DTYPE_F32, 32), g.state(3, 1, 8), "write layer 3");
                }).ok());
    seq.n_past = n_end;
    ASSERT_TRUE(kv_->passed(seq, n_end).ok());
    kv_->publish(seq, tokens);
  }

  PluginRegistry registry_;
  ModelConfig config_ = hybrid_config();
  std::unique_ptr<BackendHandle> backend_;
  std::unique_ptr<KvCache> kv_;
  Buffer scratch_;
};

TEST_F(HybridState, SlotsAreClearedSnapshottedAtBlockEndsAndRestoredByPrefixReuse) {
  EXPECT_EQ(kv_->layer_kind(1), uint32_t(SL_KV_STATE));
  EXPECT_EQ(kv_->state_slot_bytes(), 64u);  // both recurrent layers' 32 bytes
  EXPECT_DOUBLE_EQ(kv_->bytes_per_token(), 2.0 * 2 * 64 * 2 * 2);  // the two attention layers
  const PagePool& slots = *kv_->state_pool();
  std::vector<int32_t> tokens;
  for (int i = 0; i < 70; ++i) tokens.push_back(1000 + i * 7);

  // Sequence A: passes of 16 (page boundaries at each end) and a tail of 6.
  SequenceKv a;
  for (int32_t end : {16, 32, 48, 64, 70}) pass(a, tokens, end);
  EXPECT_EQ(read_state(a), state_after(tokens, 70));
  EXPECT_EQ(a.n_published, 4u);
  EXPECT_EQ(slots.cached_pages(), 4u);  // the snapshots at 16, 32, 48, 64
  kv_->release(a);
  EXPECT_EQ(slots.pages_in_use(), 0u);  // cached snapshots are evictable

  // Sequence B shares A's first 50 tokens: restored at 48, the longest boundary inside its prompt's
  // reusable blocks, with its own live slot holding the state there.
  std::vector<int32_t> b_tokens(tokens.begin(), tokens.begin() + 50);
  for (int i = 0; i < 10; ++i) b_tokens.push_back(5 + i);
  SequenceKv b;
  ASSERT_TRUE(kv_->reuse_prefix(b, b_tokens, (b_tokens.size() - 1) / 16).ok());
  EXPECT_EQ(b.n_past, 48);
  EXPECT_EQ(b.pages.size(), 3u);
  ASSERT_GE(b.state_slot, 0);
  EXPECT_EQ(read_state(b), state_after(tokens, 48));
  // It goes on from there as if it had computed the prefix itself.
  pass(b, b_tokens, 60);
  EXPECT_EQ(read_state(b), state_after(b_tokens, 60));

  // Sequence C with A's whole prompt: 64; one that diverges in block 1: 16 only.
  SequenceKv c;
  ASSERT_TRUE(kv_->reuse_prefix(c, tokens, 4).ok());
  EXPECT_EQ(c.n_past, 64);
  EXPECT_EQ(read_state(c), state_after(tokens, 64));
  auto diverged = tokens;
  diverged[20] = 3;
  SequenceKv d;
  ASSERT_TRUE(kv_->reuse_prefix(d, diverged, 4).ok());
  EXPECT_EQ(d.n_past, 16);
  EXPECT_EQ(read_state(d), state_after(tokens, 16));
  kv_->release(b);
  kv_->release(c);
  kv_->release(d);

  // A fresh sequence starts from a cleared state, even in a slot a snapshot held before.
  SequenceKv e;
  std::vector<int32_t> other(20, 9);
  ASSERT_TRUE(kv_->reuse_prefix(e, other, 1).ok());
  EXPECT_EQ(e.n_past, 0);
  pass(e, other, 5);
  EXPECT_EQ(read_state(e), state_after(other, 5));
  kv_->release(e);
}

TEST_F(HybridState, AnEvictedSnapshotShortensTheReuseToTheLongestKept) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 64; ++i) tokens.push_back(2000 + i * 3);
  SequenceKv a;
  for (int32_t end : {16, 32, 48, 64}) pass(a, tokens, end);
  kv_->release(a);
  PagePool& slots = const_cast<PagePool&>(*kv_->state_pool());
  ASSERT_EQ(slots.cached_pages(), 4u);
  // Every free slot taken, and one more: the least recently used snapshot (at 16) is evicted.
  auto taken = slots.allocate(slots.free_pages() + 1);
  ASSERT_TRUE(taken.ok()) << taken.message();
  EXPECT_EQ(slots.cached_pages(), 3u);
  slots.release(*taken);
  // A prompt sharing one block finds its KV page cached but not the state there: nothing reused.
  std::vector<int32_t> short_prompt(tokens.begin(), tokens.begin() + 20);
  SequenceKv s;
  ASSERT_TRUE(kv_->reuse_prefix(s, short_prompt, 1).ok());
  EXPECT_EQ(s.n_past, 0);
  kv_->release(s);
  // The longer boundaries still serve.
  SequenceKv l;
  ASSERT_TRUE(kv_->reuse_prefix(l, tokens, 3).ok());
  EXPECT_EQ(l.n_past, 48);
  EXPECT_EQ(read_state(l), state_after(tokens, 48));
  kv_->release(l);
}

TEST(KvLayers, Qwen3_5ConversationReusesItsPrefixAndGivesWhatComputingItGives) {
  // zoo2/qwen3_5_text: layers 0-2 Gated DeltaNet (a state slot a sequence), layer 3 full attention.
  // The second turn repeats the first turn's prompt and answer: the warm engine restores the state
  // snapshot at a block end and the pages before it, and must continue exactly as a cold engine.
  SLUICE_REQUIRE_REFERENCE("models/zoo2/qwen3_5_text/config.json");
  const std::string dir = test::reference_path("models/zoo2/qwen3_5_text").string();
  auto rt = Runtime::open(options(dir));
  ASSERT_TRUE(rt.ok()) << rt.message();
  EXPECT_EQ((*rt)->kv().layer_kind(0), uint32_t(SL_KV_STATE));
  EXPECT_EQ((*rt)->kv().layer_kind(3), uint32_t(SL_KV_FULL));
  auto warm = Engine::create(options(dir));
  auto cold = Engine::create(options(dir));
  ASSERT_TRUE(warm.ok() && cold.ok());
  const auto first = prompt_of(4, 70);
  const auto answer = (*warm)->generate(greedy(first, 12));
  ASSERT_EQ(answer.ids.size(), 12u);
  EXPECT_EQ((*cold)->generate(greedy(first, 12)).ids, answer.ids);
  auto next = first;
  next.insert(next.end(), answer.ids.begin(), answer.ids.end());
  for (int j = 0; j < 9; ++j) next.push_back(700 + 3 * j);
  auto cold_again = Engine::create(options(dir));
  ASSERT_TRUE(cold_again.ok());
  const auto reused = (*warm)->generate(greedy(next, 20));
  const auto fresh = (*cold_again)->generate(greedy(next, 20));
  EXPECT_GT(reused.stats.cached_tokens, 0);
  EXPECT_EQ(fresh.stats.cached_tokens, 0);
  EXPECT_EQ(reused.ids, fresh.ids);
  // A prompt that shares only part of a block past the last snapshot reuses up to that snapshot.
  auto branch = first;
  branch.resize(60);
  for (int j = 0; j < 9; ++j) branch.push_back(500 + j);
  const auto branch_reused = (*warm)->generate(greedy(branch, 20));
  auto cold_branch = Engine::create(options(dir));
  ASSERT_TRUE(cold_branch.ok());
  EXPECT_GT(branch_reused.stats.cached_tokens, 0);
  EXPECT_EQ(branch_reused.ids, (*cold_branch)->generate(greedy(branch, 20)).ids);
}

TEST(KvLayers, Qwen3_5PromptsAreSnapshottedInsideTheirPrefillPass) {
  // A prompt's recurrent state is snapshotted where its passes end. With one 256-token pass for a
  // 150-token prompt that was nowhere, so a later request sharing the prompt reused nothing; passes
  // now also end at every state_snapshot_tokens (64 here) and at the prompt's last whole block (144).
  SLUICE_REQUIRE_REFERENCE("models/zoo2/qwen3_5_text/config.json");
  const std::string dir = test::reference_path("models/zoo2/qwen3_5_text").string();
  EngineOptions o = options(dir);
  o.prefill_size = 256;
  o.state_snapshot_tokens = 64;
  auto warm = Engine::create(o);
  ASSERT_TRUE(warm.ok()) << warm.message();
  const auto prompt = prompt_of(7, 150);
  const auto first = (*warm)->generate(greedy(prompt, 4));
  ASSERT_EQ(first.finish, FinishReason::kLength) << first.error;
  EXPECT_EQ(first.stats.cached_tokens, 0);
  auto cold_result = [&](const std::vector<int32_t>& p) {
    auto cold = Engine::create(o);
    EXPECT_TRUE(cold.ok()) << cold.message();
    return cold.ok() ? (*cold)->generate(greedy(p, 16)).ids : std::vector<int32_t>{};
  };
  // The whole prompt and a new tail: reused up to the prompt's last whole block.
  auto longer = prompt;
  for (int j = 0; j < 10; ++j) longer.push_back(900 + j);
  const auto whole = (*warm)->generate(greedy(longer, 16));
  EXPECT_EQ(whole.stats.cached_tokens, 144);
  EXPECT_EQ(whole.ids, cold_result(longer));
  // The first 100 tokens shared: reused up to the last multiple of 64 inside them.
  auto branch = prompt;
  branch.resize(100);
  for (int j = 0; j < 10; ++j) branch.push_back(800 + j);
  const auto partway = (*warm)->generate(greedy(branch, 16));
  EXPECT_EQ(partway.stats.cached_tokens, 64);
  EXPECT_EQ(partway.ids, cold_result(branch));
}

TEST(KvLayers, Qwen3_5RequestsSideBySideGiveWhatEachGivesAlone) {
  // Three sequences in one batch: the recurrent ops walk each sequence's tokens through its own state
  // slot (prefill chunks beside decode tokens of the others), and each answers as it does alone.
  SLUICE_REQUIRE_REFERENCE("models/zoo2/qwen3_5_text/config.json");
  const std::string dir = test::reference_path("models/zoo2/qwen3_5_text").string();
  auto alone = Engine::create(options(dir));
  auto together = Engine::create(options(dir, 3));
  ASSERT_TRUE(alone.ok() && together.ok());
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 3; ++i) requests.push_back(greedy(prompt_of(10 + i, 19 + 37 * i), 30));
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : requests) want.push_back((*alone)->generate(r).ids);
  std::vector<std::future<GenerationResult>> futures;
  for (const auto& r : requests) futures.push_back(std::async(std::launch::async, [&, r] { return (*together)->generate(r); }));
  for (std::size_t i = 0; i < futures.size(); ++i) {
    const auto got = futures[i].get();
    EXPECT_EQ(got.finish, FinishReason::kLength) << got.error;
    EXPECT_EQ(got.ids, want[i]) << "request " << i;
  }
}

// n choices where the cache cannot fork (sliding-window pages): the other choices take the prompt's
// published blocks from the prefix cache (window pages included) and compute the rest.
TEST(KvLayers, ChoicesOverSlidingWindowPagesStartFromThePrefixCache) {
  const ModelCopy model(tiny_config(kSlidingFull, "24"));
  auto engine = Engine::create(options(model.dir(), 3, true));
  auto alone = Engine::create(options(model.dir(), 1, true));
  ASSERT_TRUE(engine.ok() && alone.ok());
  const auto prompt = prompt_of(9, 70);  // four full blocks and 6 positions
  const auto want = (*alone)->generate(greedy(prompt, 30)).ids;
  GenerationRequest r = greedy(prompt, 30);
  r.n = 3;
  const auto got = test::run_choices(**engine, r);
  ASSERT_EQ(got.results.size(), 3u);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(got.results.at(c).ids, want) << "choice " << c;
  for (int i = 0; i < 100 && (*engine)->metrics().active_sequences != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const EngineMetrics m = (*engine)->metrics();
  EXPECT_EQ(m.forked_sequences_total, 0u);
  EXPECT_EQ(m.prefilled_tokens_total, 70u + 2 * 6);
  EXPECT_EQ(m.kv_window_pages_in_use, 0u);
}

// n choices of a hybrid model: the forked choices get a copy of the recurrent state at the prompt's end.
TEST(KvLayers, Qwen3_5ChoicesForkTheRecurrentStateAndGiveWhatOneChoiceGives) {
  SLUICE_REQUIRE_REFERENCE("models/zoo2/qwen3_5_text/config.json");
  const std::string dir = test::reference_path("models/zoo2/qwen3_5_text").string();
  auto engine = Engine::create(options(dir, 3));
  auto alone = Engine::create(options(dir));
  ASSERT_TRUE(engine.ok() && alone.ok());
  const auto prompt = prompt_of(12, 45);
  const auto want = (*alone)->generate(greedy(prompt, 20)).ids;
  GenerationRequest r = greedy(prompt, 20);
  r.n = 3;
  const auto got = test::run_choices(**engine, r);
  ASSERT_EQ(got.results.size(), 3u);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(got.results.at(c).ids, want) << "choice " << c;
  for (int i = 0; i < 100 && (*engine)->metrics().active_sequences != 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const EngineMetrics m = (*engine)->metrics();
  EXPECT_EQ(m.forked_sequences_total, 2u);
  EXPECT_EQ(m.prefilled_tokens_total, 45u);
  EXPECT_EQ(m.kv_pages_in_use, 0u);
}

TEST(KvLayers, AModelWithLinearAttentionLayersIsRefusedByName) {
  const ModelCopy model(tiny_config(R"(["full_attention","linear_attention","full_attention","linear_attention"])", "null"));
  auto rt = Runtime::open(options(model.dir()));
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.message().find("linear-attention"), std::string::npos) << rt.message();
  EXPECT_NE(rt.message().find("layer 1"), std::string::npos) << rt.message();
}

}  // namespace
}  // namespace sluice
