// `sluice tokenize` and `sluice detokenize`: the tokenizer on the command line, for checking a
// model's tokenizer against other implementations.
//
//   sluice tokenize   (--model DIR | --tokenizer FILE) [--json] [--add-special]   < text
//   sluice detokenize (--model DIR | --tokenizer FILE)                            < [ids...]
//
// tokenize encodes stdin exactly as read (a trailing newline is text too) and prints the ids
// space-separated, or {"ids":[...]} with --json. detokenize reads a JSON array of ids (or the
// {"ids":[...]} object tokenize --json writes) and prints the text, special tokens included,
// with nothing appended, so the two commands round-trip byte for byte.
#include <cstdio>
#include <optional>
#include <string>

#include "commands.h"
#include "model_source.h"
#include "stdin_input.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

namespace sluice::cli {
namespace {

struct Options {
  std::string model_dir;
  std::string tokenizer_file;
  bool json = false;
  bool add_special = false;
  bool help = false;
};

constexpr const char* kTokenizeUsage =
    "usage: sluice tokenize (--model DIR | --tokenizer FILE) [--json] [--add-special]\n"
    "  Reads UTF-8 text on stdin and prints its token ids, space-separated.\n"
    "  --model DIR        a model directory holding tokenizer.json\n"
    "  --tokenizer FILE   a tokenizer.json file\n"
    "  --json             print {\"ids\":[...]} instead\n"
    "  --add-special      apply the tokenizer's post-processor (e.g. add BOS)\n";

constexpr const char* kDetokenizeUsage =
    "usage: sluice detokenize (--model DIR | --tokenizer FILE)\n"
    "  Reads a JSON array of token ids on stdin and prints the text (special tokens included).\n";

// Parses the options; nullopt after printing a usage error.
std::optional<Options> parse_options(const Args& args, bool allow_encode_flags, const char* command, const char* usage) {
  Options options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&](std::string& out) {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "sluice %s: %s needs a value\n%s", command, arg.c_str(), usage);
        return false;
      }
      out = args[++i];
      return true;
    };
    if (arg == "--help" || arg == "-h") {
      options.help = true;
    } else if (arg == "--model") {
      if (!value(options.model_dir)) return std::nullopt;
    } else if (arg == "--tokenizer") {
      if (!value(options.tokenizer_file)) return std::nullopt;
    } else if (allow_encode_flags && arg == "--json") {
      options.json = true;
    } else if (allow_encode_flags && arg == "--add-special") {
      options.add_special = true;
    } else {
      std::fprintf(stderr, "sluice %s: unknown option '%s'\n%s", command, arg.c_str(), usage);
      return std::nullopt;
    }
  }
  if (options.help) return options;
  if (options.model_dir.empty() == options.tokenizer_file.empty()) {
    std::fprintf(stderr, "sluice %s: give exactly one of --model or --tokenizer\n%s", command, usage);
    return std::nullopt;
  }
  return options;
}

Result<Tokenizer> load_tokenizer(const Options& options) {
  if (!options.model_dir.empty()) return Tokenizer::load_from_model_dir(options.model_dir);
  return Tokenizer::load(options.tokenizer_file);
}

}  // namespace

int run_tokenize(const Args& args) {
  auto options = parse_options(args, /*allow_encode_flags=*/true, "tokenize", kTokenizeUsage);
  if (!options) return 2;
  if (options->help) {
    std::fputs(kTokenizeUsage, stdout);
    return 0;
  }
  if (!options->model_dir.empty()) {
    auto model = resolve_model_arg("tokenize", options->model_dir);
    if (!model) return 1;
    options->model_dir = model->dir;
  }
  auto tokenizer = load_tokenizer(*options);
  if (!tokenizer) {
    std::fprintf(stderr, "sluice tokenize: %s\n", tokenizer.message().c_str());
    return 1;
  }
  auto input = read_stdin();
  if (!input) {
    std::fprintf(stderr, "sluice tokenize: %s\n", input.message().c_str());
    return 1;
  }
  auto ids = tokenizer->encode(*input, options->add_special);
  std::string out = options->json ? "{\"ids\":[" : "";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out += options->json ? "," : " ";
    out += std::to_string(ids[i]);
  }
  out += options->json ? "]}\n" : "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int run_detokenize(const Args& args) {
  auto options = parse_options(args, /*allow_encode_flags=*/false, "detokenize", kDetokenizeUsage);
  if (!options) return 2;
  if (options->help) {
    std::fputs(kDetokenizeUsage, stdout);
    return 0;
  }
  if (!options->model_dir.empty()) {
    auto model = resolve_model_arg("detokenize", options->model_dir);
    if (!model) return 1;
    options->model_dir = model->dir;
  }
  auto tokenizer = load_tokenizer(*options);
  if (!tokenizer) {
    std::fprintf(stderr, "sluice detokenize: %s\n", tokenizer.message().c_str());
    return 1;
  }
  auto input = read_stdin();
  if (!input) {
    std::fprintf(stderr, "sluice detokenize: %s\n", input.message().c_str());
    return 1;
  }
  auto doc = json::parse(*input, "stdin");
  if (!doc) {
    std::fprintf(stderr, "sluice detokenize: %s\n", doc.message().c_str());
    return 1;
  }
  const rapidjson::Value* list = doc->IsArray() ? &*doc : json::member(*doc, "ids");
  if (list == nullptr || !list->IsArray()) {
    std::fprintf(stderr, "sluice detokenize: stdin must be a JSON array of token ids\n");
    return 1;
  }
  std::vector<int32_t> ids;
  ids.reserve(list->Size());
  for (const auto& id : list->GetArray()) {
    if (!id.IsInt()) {
      std::fprintf(stderr, "sluice detokenize: token ids must be integers\n");
      return 1;
    }
    ids.push_back(id.GetInt());
  }
  std::string text = tokenizer->decode(ids);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace sluice::cli
