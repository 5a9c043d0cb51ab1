#include "server/grammar_cache.h"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "constrain/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {

std::shared_ptr<const constrain::VocabIndex> GrammarCache::vocab() {
  std::call_once(vocab_once_, [&] { vocab_ = constrain::VocabIndex::from_tokenizer(tokenizer_, stop_ids_); });
  return vocab_;
}

Result<std::shared_ptr<const constrain::CompiledGrammar>> GrammarCache::get(const std::string& key, const Build& build) {
  {
    std::lock_guard lock(mu_);
    if (auto it = entries_.find(key); it != entries_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      return it->second.first;
    }
  }
  auto grammar = build();
  if (!grammar) return grammar.error();
  auto compiled = std::make_shared<const constrain::CompiledGrammar>(std::move(*grammar), vocab());
  std::lock_guard lock(mu_);
  if (entries_.count(key)) return compiled;  // built twice at once: keep the first
  order_.push_front(key);
  entries_.emplace(key, std::make_pair(compiled, order_.begin()));
  while (entries_.size() > capacity_) {
    entries_.erase(order_.back());
    order_.pop_back();
  }
  return compiled;
}

Result<std::shared_ptr<const constrain::CompiledGrammar>> GrammarCache::for_schema(const rapidjson::Value& schema) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  schema.Accept(writer);
  return get(std::string("schema:") + buffer.GetString(), [&] { return constrain::compile_json_schema(schema); });
}

Result<std::shared_ptr<const constrain::CompiledGrammar>> GrammarCache::any_object() {
  return get("json_object", [] { return constrain::compile_any_json_object(); });
}

}  // namespace sluice::server
