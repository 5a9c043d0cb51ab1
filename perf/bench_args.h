#pragma once
// What the model benchmarks in perf/ parse alike: the options that choose the model and how it runs
// (--model, --backend, --backend-options, --threads, --kv-codec, --kv-recent, --plugin-dir, --decode-ahead), and
// comma-separated lists.
#include <sstream>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace sluice::perf {

// Applies `arg` to o when it is one of the shared options (next() gives its value); false otherwise.
template <class Next>
bool engine_option(const std::string& arg, Next&& next, EngineOptions& o) {
  if (arg == "--model") o.model_dir = next();
  else if (arg == "--backend") o.backend = next();
  else if (arg == "--backend-options") o.backend_options = next();
  else if (arg == "--threads") o.threads = std::stoi(next());
  else if (arg == "--kv-codec") o.kv_codec = next();
  else if (arg == "--kv-recent") o.kv_recent = std::stoi(next());
  else if (arg == "--plugin-dir") o.plugin_dir = next();
  else if (arg == "--decode-ahead") o.decode_ahead = next();
  else return false;
  return true;
}

// "0,8192,32768" → {0, 8192, 32768}.
inline std::vector<int> int_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoi(item));
  return out;
}

}  // namespace sluice::perf
