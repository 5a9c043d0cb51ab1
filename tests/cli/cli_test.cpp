// The `sluice` program as users run it: generate/perplexity JSON output against the goldens, the
// tokenizer round trip through tokenize/detokenize, conformance against a second backend, and clear
// errors with the right exit codes.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "reference.h"
#include "util/json.h"

namespace sluice {
namespace {

struct Run {
  int exit_code;
  std::string out;  // stdout and stderr together
};

Run run(const std::string& args, const std::string& stdin_text = "", bool plugin_dir = true) {
  const auto dir = std::filesystem::temp_directory_path() / ("sluice_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto input = dir / "stdin";
  std::ofstream(input) << stdin_text;
  const std::string plugins = plugin_dir ? " --plugin-dir " + test::binary_path("lib").string() : "";
  const std::string cmd = test::binary_path("bin/sluice").string() + " " + args + plugins + " < " + input.string() + " 2>&1";
  Run r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string last_line(const std::string& text) {
  auto end = text.find_last_not_of('\n');
  auto start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

std::string ids_csv(const rapidjson::Value& a) {
  std::string s;
  for (const auto& v : a.GetArray()) s += (s.empty() ? "" : ",") + std::to_string(v.GetInt());
  return s;
}

TEST(CliGenerate, JsonLastLineHasGoldenGreedyIdsAndStats) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/golden.json");
  auto golden = json::parse_file(test::reference_path("models/tiny-code-qwen2/golden.json"));
  ASSERT_TRUE(golden.ok());
  const auto& prompt = (*golden)["prompts"][0];
  const auto r = run("generate --model " + test::reference_path("models/tiny-code-qwen2").string() + " --prompt-ids " +
                     ids_csv(prompt["ids"]) + " --max-tokens " + std::to_string(prompt["greedy_ids"].Size()) +
                     " --ignore-eos --kv-codec f32 --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto doc = json::parse(last_line(r.out), "generate output");
  ASSERT_TRUE(doc.ok()) << r.out;
  EXPECT_EQ(ids_csv((*doc)["ids"]), ids_csv(prompt["greedy_ids"]));
  EXPECT_EQ(ids_csv((*doc)["prompt_ids"]), ids_csv(prompt["ids"]));
  EXPECT_EQ(std::string((*doc)["text"].GetString()), std::string(prompt["greedy_text"].GetString()));
  ASSERT_TRUE((*doc).HasMember("stats"));
  EXPECT_EQ((*doc)["stats"]["completion_tokens"].GetInt(), static_cast<int>(prompt["greedy_ids"].Size()));
  EXPECT_GT((*doc)["stats"]["decode_tps"].GetDouble(), 0.0);
}

// --draft ngram: the same greedy ids as plain decoding, and the acceptance in --json's stats.
TEST(CliGenerate, NgramDraftingKeepsTheGreedyIdsAndReportsAcceptance) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/golden.json");
  auto golden = json::parse_file(test::reference_path("models/tiny-code-qwen2/golden.json"));
  ASSERT_TRUE(golden.ok());
  const auto& prompt = (*golden)["prompts"][0];
  const std::string common = "generate --model " + test::reference_path("models/tiny-code-qwen2").string() + " --prompt-ids " +
                             ids_csv(prompt["ids"]) + " --max-tokens " + std::to_string(prompt["greedy_ids"].Size()) +
                             " --ignore-eos --kv-codec f32 --threads 2 --json";
  const auto r = run(common + " --draft ngram --num-draft-tokens 4");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto doc = json::parse(last_line(r.out), "generate output");
  ASSERT_TRUE(doc.ok()) << r.out;
  EXPECT_EQ(ids_csv((*doc)["ids"]), ids_csv(prompt["greedy_ids"]));
  const auto& st = (*doc)["stats"];
  ASSERT_TRUE(st.HasMember("acceptance_rate") && st.HasMember("tokens_per_pass") && st.HasMember("draft_tokens")) << r.out;
  EXPECT_GT(st["draft_tokens"].GetInt(), 0) << r.out;
  EXPECT_GE(st["tokens_per_pass"].GetDouble(), 1.0);
  EXPECT_NEAR(st["acceptance_rate"].GetDouble(), static_cast<double>(st["draft_accepted"].GetInt()) / st["draft_tokens"].GetInt(), 1e-4);
  const auto bad = run(common + " --draft medusa");
  EXPECT_EQ(bad.exit_code, 1) << bad.out;
  EXPECT_NE(bad.out.find("--draft must be ngram"), std::string::npos) << bad.out;
}

TEST(CliPerplexity, ScoreAllOverTheHeldOutWindowMatchesTransformers) {
  SLUICE_REQUIRE_REFERENCE("models/tiny-code-qwen2/golden.json");
  auto golden = json::parse_file(test::reference_path("models/tiny-code-qwen2/golden.json"));
  ASSERT_TRUE(golden.ok());
  const auto& eval = (*golden)["nll_eval"];
  const auto ids_file = std::filesystem::temp_directory_path() / ("sluice_nll_ids_" + std::to_string(::getpid()) + ".json");
  std::ofstream(ids_file) << "[" << ids_csv(eval["ids"]) << "]";
  const auto r = run("perplexity --model " + test::reference_path("models/tiny-code-qwen2").string() + " --ids-file " +
                     ids_file.string() + " --ctx 1024 --chunks 1 --score all --threads 2 --json");
  std::filesystem::remove(ids_file);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto doc = json::parse(last_line(r.out), "perplexity output");
  ASSERT_TRUE(doc.ok()) << r.out;
  EXPECT_NEAR((*doc)["mean_nll"].GetDouble(), eval["mean_nll"].GetDouble(), 2e-3);
  EXPECT_EQ((*doc)["tokens_scored"].GetInt(), 1023);
  EXPECT_NEAR((*doc)["ppl"].GetDouble(), std::exp((*doc)["mean_nll"].GetDouble()), 1e-3);
  EXPECT_GT((*doc)["stderr"].GetDouble(), 0.0);
}

TEST(CliTokenize, TokenizeThenDetokenizeRoundTripsOnTheBundledModel) {
  const std::string model = test::source_path("models/tiny-code-qwen2").string();
  const std::string text = "def f(x):\n    return x ** 2  # ünïcode ✓\n";
  const auto t = run("tokenize --model " + model + " --json", text, false);
  ASSERT_EQ(t.exit_code, 0) << t.out;
  auto doc = json::parse(t.out, "tokenize output");
  ASSERT_TRUE(doc.ok()) << t.out;
  ASSERT_GT((*doc)["ids"].Size(), 5u);
  const auto d = run("detokenize --model " + model, "[" + ids_csv((*doc)["ids"]) + "]", false);
  ASSERT_EQ(d.exit_code, 0) << d.out;
  EXPECT_EQ(d.out, text);
}

TEST(CliConformance, JsonComparesWithTheBackendNamedByAgainstAndWithNoneByDefaultOnCpu) {
  const auto compared = run("conformance --backend cpu --against cpu --quick --json");
  ASSERT_EQ(compared.exit_code, 0) << compared.out;
  auto doc = json::parse(compared.out, "sluice conformance --json");
  ASSERT_TRUE(doc.ok()) << compared.out;
  EXPECT_TRUE((*doc)["passed"].GetBool());
  EXPECT_TRUE((*doc)["against"].IsString());
  int compared_ops = 0;
  for (const auto& op : (*doc)["ops"].GetArray()) {
    if (std::string(op["status"].GetString()) != "pass") continue;
    EXPECT_EQ(std::string(op["against"].GetString()), "compared") << op["op"].GetString();
    EXPECT_GT(op["compared"].GetInt(), 0) << op["op"].GetString();
    EXPECT_EQ(op["max_diff"].GetDouble(), 0.0) << op["op"].GetString();
    ++compared_ops;
  }
  EXPECT_GE(compared_ops, 40);
  // The CPU backend under test is not compared with itself unless asked.
  const auto alone = run("conformance --backend cpu --quick --json");
  ASSERT_EQ(alone.exit_code, 0) << alone.out;
  auto alone_doc = json::parse(alone.out, "sluice conformance --json");
  ASSERT_TRUE(alone_doc.ok()) << alone.out;
  EXPECT_TRUE((*alone_doc)["against"].IsNull());
  const auto unknown = run("conformance --backend cpu --against nosuch --quick");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.out.find("--against: unknown backend 'nosuch'"), std::string::npos) << unknown.out;
}

TEST(CliErrors, UsageErrorsExitTwoAndRuntimeErrorsExitOneWithMessages) {
  const auto no_prompt = run("generate --model " + test::source_path("models/tiny-code-qwen2").string());
  EXPECT_EQ(no_prompt.exit_code, 2);
  EXPECT_NE(no_prompt.out.find("--prompt"), std::string::npos) << no_prompt.out;
  const auto missing = run("generate --model /nonexistent/model --prompt hi");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.out.find("/nonexistent/model"), std::string::npos) << missing.out;
  const auto unknown = run("frobnicate", "", false);
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.out.find("unknown command"), std::string::npos);
  const auto bad_ids = run("generate --model " + test::source_path("models/tiny-code-qwen2").string() + " --prompt-ids 1,x,3");
  EXPECT_EQ(bad_ids.exit_code, 2);
  EXPECT_NE(bad_ids.out.find("'x' is not a token id"), std::string::npos) << bad_ids.out;
}

TEST(CliChatTemplate, HostileTemplatesAndVariablesEndInAMessageNotACrash) {
  const auto dir = std::filesystem::temp_directory_path() / ("sluice_cli_tmpl_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto chat_template = [&](const std::string& source, const std::string& variables = "{}") {
    const auto file = dir / "t.jinja";
    std::ofstream(file) << source;
    return run("chat-template --template " + file.string(), variables, false);
  };
  const auto cyclic = chat_template("{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}");
  EXPECT_EQ(cyclic.exit_code, 0) << cyclic.out;
  EXPECT_EQ(cyclic.out, "<Namespace {'a': <Namespace {...}>}>");
  const auto power = chat_template("{{ 1 ** 9999999999999 }}");
  EXPECT_EQ(power.exit_code, 0) << power.out;
  EXPECT_EQ(power.out, "1");
  const auto wide = chat_template("{{ 'x'|center(99999999999999999) }}");
  EXPECT_EQ(wide.exit_code, 1);
  EXPECT_NE(wide.out.find("size budget"), std::string::npos) << wide.out;
  std::string deep_template;
  for (int i = 0; i < 100000; ++i) deep_template += "{% if true %}";
  const auto nested = chat_template(deep_template);
  EXPECT_EQ(nested.exit_code, 1);
  EXPECT_NE(nested.out.find("TemplateSyntaxError: the template nests too deeply"), std::string::npos) << nested.out;
  const std::string deep_json = "{\"tools\": " + std::string(24000, '[') + std::string(24000, ']') + "}";
  const auto deep = chat_template("{{ tools|length }}", deep_json);
  EXPECT_EQ(deep.exit_code, 2);  // stdin's JSON reader refuses it before the template sees it
  EXPECT_NE(deep.out.find("max_depth"), std::string::npos) << deep.out;
  std::filesystem::remove_all(dir);
}

// Deep JSON used to overflow the stack (SIGSEGV) in detokenize, chat-template and in generate's
// safetensors header; now each is a message and a non-zero exit, as is stdin over its limit.
TEST(CliErrors, DeepOrOversizedInputIsAMessageAndNonZeroExitNotACrash) {
  const std::string model = test::source_path("models/tiny-code-qwen2").string();
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');

  const auto detok = run("detokenize --model " + model, deep, false);
  EXPECT_EQ(detok.exit_code, 1) << detok.out;
  EXPECT_NE(detok.out.find("sluice detokenize: stdin: JSON over a limit"), std::string::npos) << detok.out;
  EXPECT_NE(detok.out.find("max_depth"), std::string::npos) << detok.out;

  const auto tmpl = run("chat-template --model " + model, R"({"messages":)" + deep + "}", false);
  EXPECT_EQ(tmpl.exit_code, 2) << tmpl.out;
  EXPECT_NE(tmpl.out.find("max_depth"), std::string::npos) << tmpl.out;
  const auto malformed = run("chat-template --model " + model, R"({"messages": [}})", false);
  EXPECT_EQ(malformed.exit_code, 2) << malformed.out;
  EXPECT_NE(malformed.out.find("stdin: malformed JSON at offset"), std::string::npos) << malformed.out;

  const auto big = run("tokenize --model " + model, std::string((64u << 20) + 1, 'a'), false);
  EXPECT_EQ(big.exit_code, 1) << big.out.substr(0, 500);
  EXPECT_NE(big.out.find("stdin: more than 67108864 bytes"), std::string::npos) << big.out.substr(0, 500);

  // A model folder whose weights file has a deep JSON header.
  const auto dir = std::filesystem::temp_directory_path() / ("sluice_cli_deep_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const char* name : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(std::filesystem::path(model) / name, dir / name,
                               std::filesystem::copy_options::overwrite_existing);
  std::string header_length(8, '\0');
  for (int i = 0; i < 8; ++i) header_length[i] = static_cast<char>((deep.size() >> (8 * i)) & 0xff);
  std::ofstream(dir / "model.safetensors", std::ios::binary) << header_length << deep;
  const auto gen = run("generate --model " + dir.string() + " --prompt hi");
  EXPECT_EQ(gen.exit_code, 1) << gen.out;
  EXPECT_NE(gen.out.find("model.safetensors header: JSON over a limit"), std::string::npos) << gen.out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice
