#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/json_fields.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/unicode.h"

namespace sluice::tokenizer {
namespace {

bool is_word_char(char32_t cp) { return is_alphanumeric(cp) || cp == '_'; }

// The code point that ends text[..pos].
char32_t code_point_before(std::string_view text, std::size_t pos) {
  std::size_t start = pos - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
  return next_code_point(text, start);
}

}  // namespace

Result<AddedVocabulary> AddedVocabulary::from_json(const rapidjson::Value& added_tokens, const Normalizer* normalizer) {
  AddedVocabulary vocab;
  if (added_tokens.IsNull()) return vocab;
  if (!added_tokens.IsArray()) return make_error("\"added_tokens\" must be an array");
  for (const auto& item : added_tokens.GetArray()) {
    if (!item.IsObject() || !item.HasMember("id") || !is_token_id(item["id"]) || field_string(item, "content").empty())
      return make_error("an added token needs an id (" + token_id_rule() + ") and non-empty content");
    AddedToken token;
    token.id = item["id"].GetInt();
    token.content = field_string(item, "content");
    token.single_word = field_bool(item, "single_word", false);
    token.lstrip = field_bool(item, "lstrip", false);
    token.rstrip = field_bool(item, "rstrip", false);
    token.special = field_bool(item, "special", false);
    token.normalized = field_bool(item, "normalized", !token.special);
    vocab.tokens_.push_back(std::move(token));
  }
  // Pointers into tokens_ are taken only now that it no longer grows.
  for (std::size_t i = 0; i < vocab.tokens_.size(); ++i) {
    const AddedToken& token = vocab.tokens_[i];
    vocab.index_by_id_[token.id] = i;
    vocab.id_by_content_[token.content] = token.id;
    if (token.normalized && normalizer != nullptr) vocab.normalized_.add(normalizer->normalize(token.content), &token);
    else if (token.normalized) vocab.normalized_.add(token.content, &token);
    else vocab.raw_.add(token.content, &token);
  }
  return vocab;
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  auto it = index_by_id_.find(id);
  return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::id_of(std::string_view content) const {
  auto it = id_by_content_.find(content);
  if (it == id_by_content_.end()) return std::nullopt;
  return it->second;
}

int32_t AddedVocabulary::Matcher::child(int32_t node, unsigned char byte) const {
  const auto& children = nodes_[static_cast<std::size_t>(node)].children;
  auto it = std::lower_bound(children.begin(), children.end(), byte, [](const auto& c, unsigned char b) { return c.first < b; });
  return it != children.end() && it->first == byte ? it->second : -1;
}

void AddedVocabulary::Matcher::add(std::string_view content, const AddedToken* token) {
  if (content.empty()) return;
  first_byte_[static_cast<unsigned char>(content[0])] = true;
  int32_t node = 0;
  for (unsigned char byte : content) {
    int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& children = nodes_[static_cast<std::size_t>(node)].children;
      auto it = std::lower_bound(children.begin(), children.end(), byte, [](const auto& c, unsigned char b) { return c.first < b; });
      children.insert(it, {byte, next});
    }
    node = next;
  }
  if (nodes_[static_cast<std::size_t>(node)].token == nullptr) nodes_[static_cast<std::size_t>(node)].token = token;
}

// Leftmost-longest, non-overlapping matches; the gaps between them are returned as text splits.
std::vector<AddedSplit> AddedVocabulary::Matcher::split(std::string_view text) const {
  std::vector<AddedSplit> splits;
  std::size_t emitted = 0;  // end of the last split pushed
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const AddedToken* best = nullptr;
    std::size_t best_end = 0;
    for (int32_t node = 0, i = static_cast<int32_t>(pos); i < static_cast<int32_t>(text.size()); ++i) {
      node = child(node, static_cast<unsigned char>(text[static_cast<std::size_t>(i)]));
      if (node < 0) break;
      if (const AddedToken* t = nodes_[static_cast<std::size_t>(node)].token) {
        best = t;
        best_end = static_cast<std::size_t>(i) + 1;
      }
    }
    if (best == nullptr) {
      ++pos;
      continue;
    }
    std::size_t start = pos, stop = best_end;
    pos = best_end;  // the scan resumes after the match, kept or not (as HF's matcher does)
    if (best->single_word) {
      bool free_left = start == 0 || !is_word_char(code_point_before(text, start));
      std::size_t after = stop;
      bool free_right = stop == text.size() || !is_word_char(next_code_point(text, after));
      if (!free_left || !free_right) continue;
    }
    if (best->lstrip) {
      while (start > emitted && is_whitespace(code_point_before(text, start))) {
        --start;
        while (start > emitted && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
      }
    }
    if (best->rstrip) {
      while (stop < text.size()) {
        std::size_t next = stop;
        if (!is_whitespace(next_code_point(text, next))) break;
        stop = next;
      }
      pos = std::max(pos, stop);
    }
    if (start > emitted) splits.push_back({emitted, start, std::nullopt});
    splits.push_back({start, stop, best->id});
    emitted = stop;
  }
  if (emitted < text.size()) splits.push_back({emitted, text.size(), std::nullopt});
  return splits;
}

}  // namespace sluice::tokenizer
