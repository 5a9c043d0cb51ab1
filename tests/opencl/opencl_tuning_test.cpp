// The OpenCL backend's tuning as data (backends/opencl/cl_tuning.h), without a device: the defaults
// are the values the backend used before they were data, the built-in table gives every device those
// values, entries fall back field by field, and a user's tuning file and tune.KEY=VALUE options are
// validated (unknown keys, values out of range, malformed or oversized files are errors, not aborts).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "cl_tuning.h"

namespace sluice::ocl {
namespace {

const DeviceId kH100{"NVIDIA Corporation", "NVIDIA H100 80GB HBM3"};
const DeviceId kH200{"NVIDIA Corporation", "NVIDIA H200"};
const DeviceId kRtx{"NVIDIA Corporation", "NVIDIA GeForce RTX 4090"};
const DeviceId kAmd{"Advanced Micro Devices, Inc.", "gfx90a:sramecc+:xnack-"};
const DeviceId kIntel{"Intel(R) Corporation", "Intel(R) Arc(TM) A770 Graphics"};
const DeviceId kPocl{"AuthenticAMD", "pthread-skylake-avx512-AMD EPYC"};  // PoCL's CPU device on an AMD host

// A file in the test's temporary folder with `text`, removed with the object.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    path_ = std::filesystem::temp_directory_path() /
            ("sluice_tuning_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++) + ".txt");
    std::ofstream(path_, std::ios::binary) << text;
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

Result<ResolvedTuning> resolve_with(const DeviceId& d, const std::string& options, std::string_view table = kBuiltinTuningTable) {
  auto parsed = parse_backend_options(options);
  if (!parsed) return parsed.error();
  return resolve_tuning(d, table, *parsed);
}

// The error of resolving with `file_text` as the options' tuning file (empty when it resolved).
std::string file_error(const std::string& file_text) {
  TempFile f(file_text);
  auto r = resolve_with(kH100, "tuning=" + f.path());
  return r ? std::string() : r.message();
}

// The values each parameter had in the code before tuning was data (cl_device.cpp q4_shape,
// cl_matmul.cpp, cl_kv_cache.cpp, cl_attention.cpp, cl_backend.cpp chunk_size at the commit before
// this test): a changed default fails here.
TEST(OpenclTuning, DefaultsAreTheValuesTheBackendUsedBefore) {
  const Tuning t;
  EXPECT_EQ(t.q4_base_shape, (TeamShape{32, 4}));   // Q4Shape s{32, 4}
  EXPECT_EQ(t.q4_tall_rows, 16384u);                 // rows >= 16384 → {32, 2}
  EXPECT_EQ(t.q4_tall_shape, (TeamShape{32, 2}));
  EXPECT_EQ(t.q4_big_weights, uint64_t(1) << 24);    // rows * cols > 2^24 → {64, 2}
  EXPECT_EQ(t.q4_big_shape, (TeamShape{64, 2}));
  EXPECT_EQ(t.q4_warps_per_cu, 12u);                 // 12 * 32 * compute units
  EXPECT_EQ(t.q4_team, 0u);                          // SLUICE_OPENCL_Q4_TEAM unset
  EXPECT_EQ(t.q4_rows, 0u);                          // SLUICE_OPENCL_Q4_ROWS unset
  EXPECT_TRUE(t.q4_shape_of.empty());                // SLUICE_OPENCL_Q4_SHAPE_OF unset
  EXPECT_EQ(t.maxrreg, 0u);                          // SLUICE_OPENCL_MAXRREG unset: no cap
  EXPECT_EQ(t.dp4a, 1u);                             // on unless SLUICE_OPENCL_DP4A=0
  EXPECT_EQ(t.dp4a_min_log2, 24u);                   // min_log2 ? min_log2 : 24
  EXPECT_EQ(t.glu_blocks, 1u);                       // on unless SLUICE_OPENCL_GLU_BLOCKS=0
  EXPECT_EQ(t.res_shape, (TeamShape{32, 1}));        // team ? team : 32, rows ? rows : 1
  EXPECT_EQ(t.q4_batch_max_rows, 64u);               // the batch kernel, new with its tuning
  EXPECT_EQ(t.q4_batch_chunk, 8u);
  EXPECT_EQ(t.q4_batch_team_rows, 2u);
  EXPECT_EQ(t.q4_batch_wide_rows, 0u);               // no wide shape
  EXPECT_EQ(t.q4_batch_wide_team_rows, 2u);
  EXPECT_EQ(t.q4_batch_dp4a, 1u);                    // dp4a where the device runs it
  EXPECT_EQ(t.q4_batch_multi, 1u);               // products of one input in one launch
  EXPECT_EQ(t.clblast, 1u);                          // on unless SLUICE_OPENCL_NO_CLBLAST
  EXPECT_EQ(t.mma, 1u);                              // on unless SLUICE_OPENCL_MMA=0
  EXPECT_EQ(t.mma_bk, 64u);                          // 64 where K allows unless SLUICE_OPENCL_MMA_BK=32
  EXPECT_EQ(t.mma_bm, 128u);                         // kMmaDefaultRows
  EXPECT_EQ(t.att_wg, 64u);                          // knob ? knob : 64
  EXPECT_EQ(t.att_wg_fused, 0u);                     // the fused kernel's programs at att_wg
  EXPECT_EQ(t.att_query_parts, 0u);                  // query areas split by the device's compute units
  EXPECT_EQ(t.att_team, 0u);                         // no -DATT_TEAM: the kernel's 8
  EXPECT_EQ(t.att_kpt, 0u);                          // no -DATT_KPT: the kernel's choice
  EXPECT_EQ(t.att_vu, 0u);                           // no -DATT_VU: the kernels' 16 and 4
  EXPECT_EQ(t.att_shfl_local, 0u);
  EXPECT_EQ(t.att_short, 512u);                      // SLUICE_OPENCL_ATT_SHORT unset: 512
  EXPECT_EQ(t.att_groups_per_cu, 8u);                // fused || short_passes ? 4 : 8
  EXPECT_EQ(t.att_groups_per_cu_fused, 4u);
  EXPECT_EQ(t.fused_attention, 1u);                  // SLUICE_OPENCL_GENERIC_ATTENTION unset
  EXPECT_EQ(t.maxrreg_att, 0u);
  EXPECT_EQ(t.mma_att, 1u);                          // on unless SLUICE_OPENCL_MMA_ATT=0
  EXPECT_EQ(t.mma_att_min_run, 16u);                 // kMmaMinRun
  EXPECT_EQ(t.mma_att_groups_per_cu, 8u);            // kMmaGroupsPerCu
  EXPECT_EQ(t.mma_att_queries, 64u);                 // attention_mma's AM_BQ unless tuned
  EXPECT_EQ(t.mma_att_min_tiles, 4u);                // key_tiles / 4
  EXPECT_EQ(t.mma_att_splits, 0u);                   // SLUICE_OPENCL_MMA_ATT_SPLITS unset
  EXPECT_EQ(t.max_alloc, 0u);                        // SLUICE_OPENCL_MAX_ALLOC unset: the device's limit
}

// Every field by name, in Tuning's order: a field added without a name (or a name without a test of
// its default above) shows here.
TEST(OpenclTuning, EveryFieldHasAName) {
  const std::vector<std::string> expected = {
      "q4_base_shape", "q4_tall_rows", "q4_tall_shape", "q4_big_weights", "q4_big_shape", "q4_warps_per_cu",
      "q4_team", "q4_rows", "q4_shape_of", "maxrreg", "dp4a", "dp4a_min_log2", "glu_blocks", "res_shape",
      "q4_batch_max_rows", "q4_batch_chunk", "q4_batch_team_rows",
      "q4_batch_wide_rows", "q4_batch_wide_team_rows", "q4_batch_dp4a", "q4_batch_mma", "q4_batch_mma_min_rows",
      "q4_batch_mma_m_tiles", "q4_batch_mma_warps", "q4_batch_mma_m_warps", "q4_batch_mma_groups_per_cu", "q4_batch_mma_interleave", "q4_batch_mma_unroll", "q4_batch_multi", "clblast", "mma", "mma_bk", "mma_bm", "att_wg", "att_wg_fused", "att_query_parts", "att_team", "att_kpt", "att_vu", "att_shfl_local",
      "att_short", "att_groups_per_cu", "att_groups_per_cu_fused", "fused_attention", "maxrreg_att", "mma_att",
      "mma_att_min_run", "mma_att_groups_per_cu", "mma_att_min_tiles", "mma_att_splits", "mma_att_queries", "max_alloc"};
  EXPECT_EQ(tuning_field_names(), expected);
}

// The built-in table's Hopper entry restates the H100's measurements — the defaults, but for the
// batched decode kernel, which the H100 measured faster than the tensor-core GEMM only up to 32 rows,
// its one weight row a team under 4 rows, the prefill attention's 128 queries a work-group and the
// fused decode attention's work-group of 128 (these three measured on the H200) — and every other
// device falls back to the defaults.
TEST(OpenclTuning, BuiltinTableGivesEveryDeviceTheValuesItHadBefore) {
  const std::string hopper = "built-in [vendor \"NVIDIA*\" device \"*H100*\" \"*H200*\"]";
  struct Case {
    const char* what;
    DeviceId device;
    std::vector<std::string> applied;
    Tuning tuning;
  };
  Tuning hopper_tuning;
  hopper_tuning.q4_batch_max_rows = 32;
  hopper_tuning.q4_batch_wide_rows = 8;
  hopper_tuning.q4_batch_wide_team_rows = 4;
  hopper_tuning.q4_batch_team_rows = 1;
  hopper_tuning.mma_att_queries = 128;
  hopper_tuning.att_wg_fused = 128;
  const Case cases[] = {
      {"H100", kH100, {hopper}, hopper_tuning}, {"H200", kH200, {hopper}, hopper_tuning}, {"another NVIDIA", kRtx, {}, {}},
      {"AMD", kAmd, {}, {}},                    {"Intel", kIntel, {}, {}},                {"PoCL CPU", kPocl, {}, {}},
  };
  for (const auto& c : cases) {
    auto r = resolve_with(c.device, "");
    ASSERT_TRUE(r) << c.what << ": " << r.message();
    EXPECT_EQ(r->tuning, c.tuning) << c.what;
    EXPECT_EQ(r->applied, c.applied) << c.what;
  }
}

TEST(OpenclTuning, BuiltinTableParses) {
  auto text = parse_tuning_text(kBuiltinTuningTable, "built-in");
  ASSERT_TRUE(text) << text.message();
  EXPECT_TRUE(text->global.empty()) << "the defaults live in struct Tuning, not in the table";
  EXPECT_FALSE(text->sections.empty());
}

// Sections apply in order to the devices they match, field by field: a later one overrides what an
// earlier one set, a field it leaves out keeps the earlier value, and one no section sets its default.
TEST(OpenclTuning, LaterEntriesOverrideEarlierOnesFieldByField) {
  const std::string table =
      "# a table as tuning.txt may grow\n"
      "[vendor \"NVIDIA*\" device \"*\"]\n"
      "att_wg = 128\n"
      "q4_warps_per_cu = 16\n"
      "[vendor \"NVIDIA*\" device \"*H100*\" \"*H200*\"]\n"
      "att_wg = 256   # the H100's own\n"
      "[vendor \"Advanced Micro Devices*\" device \"gfx9*\"]\n"
      "att_team = 16\n"
      "q4_big_shape = 128x1\n";
  auto h100 = resolve_with(kH100, "", table);
  ASSERT_TRUE(h100) << h100.message();
  EXPECT_EQ(h100->tuning.att_wg, 256u);
  EXPECT_EQ(h100->tuning.q4_warps_per_cu, 16u);  // from the generic NVIDIA entry
  EXPECT_EQ(h100->tuning.att_team, 0u);          // the default
  EXPECT_EQ(h100->applied.size(), 2u);
  auto rtx = resolve_with(kRtx, "", table);
  ASSERT_TRUE(rtx) << rtx.message();
  EXPECT_EQ(rtx->tuning.att_wg, 128u);
  EXPECT_EQ(rtx->tuning.q4_warps_per_cu, 16u);
  auto amd = resolve_with(kAmd, "", table);
  ASSERT_TRUE(amd) << amd.message();
  Tuning want;
  want.att_team = 16;
  want.q4_big_shape = {128, 1};
  EXPECT_EQ(amd->tuning, want);
  // PoCL on an AMD processor says "AuthenticAMD": not AMD's GPU vendor string.
  for (const DeviceId& d : {kPocl, kIntel}) {
    auto r = resolve_with(d, "", table);
    ASSERT_TRUE(r) << r.message();
    EXPECT_EQ(r->tuning, Tuning{}) << d.name;
    EXPECT_TRUE(r->applied.empty()) << d.name;
  }
}

TEST(OpenclTuning, GlobsMatchTheWholeStringIgnoringCase) {
  EXPECT_TRUE(glob_match("*H100*", "NVIDIA H100 80GB HBM3"));
  EXPECT_FALSE(glob_match("H100*", "NVIDIA H100 80GB HBM3"));
  EXPECT_TRUE(glob_match("nvidia*", "NVIDIA Corporation"));
  EXPECT_FALSE(glob_match("NVIDIA", "NVIDIA Corporation"));
  EXPECT_TRUE(glob_match("gfx9?a*", "gfx90a:sramecc+:xnack-"));
  EXPECT_FALSE(glob_match("a?c", "ac"));
  EXPECT_TRUE(glob_match("*a*b*c", "xxaxxbxxbc"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("", ""));
  EXPECT_FALSE(glob_match("", "x"));
}

// Precedence: the table, then the file (lines before any section for every device, then its
// matching sections), then tune.KEY=VALUE options in order.
TEST(OpenclTuning, TuningFileAndOptionsOverrideTheTable) {
  TempFile f(
      "# measuring a wider attention work-group\n"
      "att_wg = 128\n"
      "q4_shape_of = 4096x4096=64x2; 14336x4096=32x1\n"
      "\n"
      "[vendor \"NVIDIA*\" device \"*H100*\"]\n"
      "att_short = 256\n"
      "[vendor \"Intel*\" device \"*\"]\n"
      "att_short = 0\n");
  auto r = resolve_with(kH100, "portable,tuning=" + f.path() + " tune.att_wg=256 tune.maxrreg=128");
  ASSERT_TRUE(r) << r.message();
  EXPECT_EQ(r->tuning.att_wg, 256u);  // the option over the file
  EXPECT_EQ(r->tuning.att_short, 256u);
  EXPECT_EQ(r->tuning.maxrreg, 128u);
  const std::vector<ShapeChoice> shapes = {{4096, 4096, {64, 2}}, {14336, 4096, {32, 1}}};
  EXPECT_EQ(r->tuning.q4_shape_of, shapes);
  const std::vector<std::string> applied = {"built-in [vendor \"NVIDIA*\" device \"*H100*\" \"*H200*\"]",
                                            f.path() + " (every device)", f.path() + " [vendor \"NVIDIA*\" device \"*H100*\"]",
                                            "tune.att_wg=256", "tune.maxrreg=128"};
  EXPECT_EQ(r->applied, applied);
  auto intel = resolve_with(kIntel, "tuning=" + f.path());
  ASSERT_TRUE(intel) << intel.message();
  EXPECT_EQ(intel->tuning.att_short, 0u);
  EXPECT_EQ(intel->tuning.att_wg, 128u);
}

TEST(OpenclTuning, TuningFileWithUnknownKeyIsAnError) {
  const std::string e = file_error("att_wg = 128\natt_wgg = 128\n");
  EXPECT_NE(e.find("line 2"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown tuning key 'att_wgg'"), std::string::npos) << e;
}

TEST(OpenclTuning, TuningFileWithBadValueIsAnErrorNamingTheAcceptedValues) {
  const std::string e = file_error("att_team = 7\n");
  EXPECT_NE(e.find("line 1"), std::string::npos) << e;
  EXPECT_NE(e.find("att_team = '7': expected 0 (the kernel's), 8, 16 or 32"), std::string::npos) << e;
  for (const char* line : {"att_wg = 65", "att_wg = -64", "att_wg = 64abc", "att_wg =", "att_wg = 0x40", "att_wg = 99999999999999999999999",
                           "res_shape = 128x1", "q4_tall_shape = 64x3", "q4_tall_shape = 64", "q4_shape_of = 4096x4096=64x3",
                           "q4_shape_of = 0x4096=64x2", "q4_shape_of = 4096x4096", "maxrreg = 8", "att_short = 2147483648",
                           "dp4a = 2"}) {
    EXPECT_NE(file_error(std::string(line) + "\n"), "") << line;
  }
}

TEST(OpenclTuning, TuningFileTooLargeIsAnError) {
  std::string text;
  while (text.size() <= kTuningMaxBytes) text += "# padding padding padding padding padding padding padding\n";
  const std::string e = file_error(text);
  EXPECT_NE(e.find("more than the " + std::to_string(kTuningMaxBytes)), std::string::npos) << e;
  EXPECT_NE(file_error("# " + std::string(kTuningMaxLine, 'x') + "\n").find("longer than"), std::string::npos);
  std::string shapes = "q4_shape_of = ";
  for (std::size_t i = 0; i <= kTuningMaxShapes; ++i) shapes += std::to_string(i + 1) + "x4096=64x2;";
  EXPECT_NE(file_error(shapes + "\n").find("more than"), std::string::npos);
}

TEST(OpenclTuning, MalformedTuningFileIsAnError) {
  for (const char* text : {"att_wg 128\n",                              // no '='
                           "[vendor \"NVIDIA*\"]\natt_wg = 128\n",      // no device
                           "[vendor \"NVIDIA* device \"*\"]\n",         // quotes out of place
                           "[device \"*\" vendor \"NVIDIA*\"]\n",       // order
                           "[vendor \"NVIDIA*\" device \"*\"\n",        // no ']'
                           "[vendor \"NVIDIA*\" device \"*\" extra]\n",  // trailing words
                           "att_wg = 128\natt_wg = 256\n"}) {           // set twice in one section
    EXPECT_NE(file_error(text), "") << text;
  }
  EXPECT_NE(file_error(std::string("att_wg = 128\0\n", 14)).find("NUL"), std::string::npos);
  // A key set in two sections, or before and inside one, is fine: the later one counts.
  EXPECT_EQ(file_error("att_wg = 128\n[vendor \"*\" device \"*\"]\natt_wg = 256\n"), "");
}

TEST(OpenclTuning, MissingTuningFileIsAnError) {
  auto r = resolve_with(kH100, "tuning=/nonexistent/sluice-tuning.txt");
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("/nonexistent/sluice-tuning.txt"), std::string::npos) << r.message();
  auto dir = resolve_with(kH100, "tuning=" + std::filesystem::temp_directory_path().string());
  EXPECT_FALSE(dir);
}

TEST(OpenclTuning, BackendOptionsAreFlagsTuningFileAndSettings) {
  auto o = parse_backend_options(" portable,host-kv  tune.att_team=16,tune.q4_shape_of=1024x4096=128x4;4096x4096=64x2 generic-attention");
  ASSERT_TRUE(o) << o.message();
  EXPECT_EQ(o->flags, (std::vector<std::string>{"portable", "host-kv", "generic-attention"}));
  const std::vector<std::pair<std::string, std::string>> settings = {{"att_team", "16"},
                                                                      {"q4_shape_of", "1024x4096=128x4;4096x4096=64x2"}};
  EXPECT_EQ(o->settings, settings);
  EXPECT_TRUE(o->tuning_file.empty());
  EXPECT_TRUE(parse_backend_options(""));
  for (const char* bad : {"portabel", "tune.att_team=7", "tune.nope=1", "tune.att_team", "tuning=", "tuning=a tuning=b",
                          "no-attention-join,glu-whole", "tune.att_wg=128=1"}) {
    auto r = parse_backend_options(bad);
    EXPECT_FALSE(r) << bad;
  }
  auto unknown = parse_backend_options("portabel");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.message().find("known: portable, host-kv, generic-attention, no-attention-join, no-res-join, no-glu-join, no-rope-join, glu-whole-block"),
            std::string::npos)
      << unknown.message();
}

// The rules each environment knob had (ATT_TEAM ∈ {8, 16, 32} and so on) are the options' rules now.
TEST(OpenclTuning, EachKnobAcceptsWhatItsEnvironmentVariableAccepted) {
  struct Rule {
    const char* key;
    std::vector<const char*> good, bad;
  };
  const Rule rules[] = {
      {"q4_team", {"32", "64", "128"}, {"16", "256", "33"}},
      {"q4_rows", {"1", "2", "4", "8"}, {"3", "16"}},
      {"att_team", {"8", "16", "32"}, {"4", "64"}},
      {"att_kpt", {"1", "2", "4", "8"}, {"3", "16"}},
      {"att_vu", {"1", "16", "64"}, {"65"}},
      {"att_wg", {"64", "128", "256"}, {"32", "512", "0"}},
      {"att_shfl_local", {"0", "1"}, {"2"}},
      {"att_groups_per_cu", {"1", "64"}, {"0", "65"}},
      {"att_groups_per_cu_fused", {"1", "64"}, {"0", "65"}},
      {"mma_att_splits", {"1", "64"}, {"65"}},
      {"mma_att_queries", {"64", "128"}, {"32", "96", "256"}},
      {"mma_bk", {"32", "64"}, {"16", "128"}},
      {"mma_bm", {"64", "128"}, {"32", "256"}},
      {"dp4a_min_log2", {"10", "24", "40"}, {"9", "41"}},
      {"res_shape", {"32x1", "64x2", "128x4", "32x8"}, {"16x1", "32x3", "128x1"}},
      {"maxrreg", {"16", "255"}, {"15", "256"}},
      {"maxrreg_att", {"16", "255"}, {"15", "256"}},
      {"att_short", {"0", "512", "2147483647"}, {"2147483648"}},
      {"max_alloc", {"4096", "1073741824"}, {"-1"}},
  };
  for (const auto& rule : rules) {
    for (const char* v : rule.good) {
      Tuning t;
      EXPECT_TRUE(set_tuning_field(t, rule.key, v)) << rule.key << " = " << v;
    }
    for (const char* v : rule.bad) {
      Tuning t;
      EXPECT_FALSE(set_tuning_field(t, rule.key, v)) << rule.key << " = " << v;
      EXPECT_EQ(t, Tuning{}) << "a refused value leaves the tuning as it was";
    }
  }
}

}  // namespace
}  // namespace sluice::ocl
