#include "quant/model_files.h"

#include <cstdio>
#include <fstream>

#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

namespace sluice::quant {

void set_quantization(rapidjson::Document& config, QuantForm defaults, const std::map<std::string, QuantForm>& overrides) {
  auto& a = config.GetAllocator();
  for (const char* key : {"quantization", "quantization_config"}) {
    rapidjson::Value q(rapidjson::kObjectType);
    q.AddMember("group_size", defaults.group_size, a);
    q.AddMember("bits", defaults.bits, a);
    for (const auto& [module, form] : overrides) {
      rapidjson::Value m(rapidjson::kObjectType);
      m.AddMember("group_size", form.group_size, a);
      m.AddMember("bits", form.bits, a);
      q.AddMember(rapidjson::Value(module.c_str(), a), m, a);
    }
    config.RemoveMember(key);
    config.AddMember(rapidjson::Value(key, a), q, a);
  }
}

Status write_json(const rapidjson::Document& doc, const std::filesystem::path& path) {
  rapidjson::StringBuffer sb;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(sb);
  w.SetIndent(' ', 2);
  doc.Accept(w);
  std::ofstream out(path);
  out << sb.GetString() << "\n";
  if (!out) return make_error("cannot write " + path.string());
  return {};
}

Result<int> copy_tokenizer_files(const std::filesystem::path& from, const std::filesystem::path& to,
                                 bool with_generation_config) {
  int copied = 0;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                           "vocab.json", "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json",
                           "generation_config.json"}) {
    if (!with_generation_config && std::string(name) == "generation_config.json") continue;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(from / name, ec)) continue;
    std::filesystem::copy_file(from / name, to / name, std::filesystem::copy_options::overwrite_existing, ec);
    if (ec) return make_error("cannot copy " + (from / name).string() + " to " + to.string() + ": " + ec.message());
    ++copied;
  }
  return copied;
}

void ProgressBar::update(uint64_t done, const std::string& what) {
  if (quiet_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const int width = 30, filled = static_cast<int>(frac * width);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.append(static_cast<std::size_t>(width - filled), '-');
  std::string label = what.size() > 48 ? "..." + what.substr(what.size() - 45) : what;
  std::fprintf(stderr, "\r[%s] %3d%%  %.2f/%.2f GB  %-48s", bar.c_str(), static_cast<int>(frac * 100), done / 1e9,
               total_ / 1e9, label.c_str());
  std::fflush(stderr);
}

void ProgressBar::finish(const std::string& summary) {
  if (quiet_) return;
  update(total_, "");
  std::fprintf(stderr, "\n%s\n", summary.c_str());
}

}  // namespace sluice::quant
