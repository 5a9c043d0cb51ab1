#pragma once
// Compiled grammars for structured outputs, per served tokenizer: the vocabulary index is built on
// the first constrained request (token bytes decoded once, the trie), and grammars are kept by
// their schema text so repeated schemas reuse their compiled rules and cached masks.
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <rapidjson/document.h>

#include "constrain/matcher.h"
#include "util/result.h"

namespace sluice {
class Tokenizer;
}

namespace sluice::server {

class GrammarCache {
 public:
  GrammarCache(const Tokenizer& tokenizer, std::vector<int32_t> stop_ids, std::size_t capacity = 32)
      : tokenizer_(tokenizer), stop_ids_(std::move(stop_ids)), capacity_(capacity) {}

  // Values valid under `schema` (an error names the schema keyword that cannot be compiled).
  Result<std::shared_ptr<const constrain::CompiledGrammar>> for_schema(const rapidjson::Value& schema);
  // Any JSON object (response_format json_object).
  Result<std::shared_ptr<const constrain::CompiledGrammar>> any_object();
  // A grammar built by the caller, cached under `key`.
  using Build = std::function<Result<constrain::Grammar>()>;
  Result<std::shared_ptr<const constrain::CompiledGrammar>> get(const std::string& key, const Build& build);

  std::shared_ptr<const constrain::VocabIndex> vocab();

 private:
  const Tokenizer& tokenizer_;
  std::vector<int32_t> stop_ids_;
  std::size_t capacity_;
  std::once_flag vocab_once_;
  std::shared_ptr<const constrain::VocabIndex> vocab_;
  std::mutex mu_;
  std::list<std::string> order_;  // most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<const constrain::CompiledGrammar>, std::list<std::string>::iterator>> entries_;
};

}  // namespace sluice::server
