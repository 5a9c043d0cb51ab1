#pragma once
// A KV codec as the tests name it: "name" or "name:options" (the --kv-codec form of one codec),
// split into the plugin name and the options string its create() receives.
#include <string>
#include <utility>

namespace sluice::test {

inline std::pair<std::string, std::string> split_codec_spec(const std::string& spec) {
  const auto colon = spec.find(':');
  if (colon == std::string::npos) return {spec, ""};
  return {spec.substr(0, colon), spec.substr(colon + 1)};
}

}  // namespace sluice::test
