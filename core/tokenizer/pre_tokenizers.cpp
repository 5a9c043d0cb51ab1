#include "tokenizer/pre_tokenizers.h"

#include <algorithm>
#include <functional>
#include <optional>

#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace sluice::tokenizer {
namespace {

using Ptr = std::unique_ptr<const PreTokenizer>;

// HF's SplitDelimiterBehavior: what becomes of each matched delimiter.
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Segment {
  Span span;
  bool is_match;
};

// HF's Pattern::find_matches: the text as alternating matched / unmatched segments.
std::vector<Segment> segments_from_matches(std::size_t length, const std::vector<Span>& matches) {
  std::vector<Segment> out;
  if (length == 0) return {{{0, 0}, false}};
  std::size_t prev = 0;
  for (auto [begin, end] : matches) {
    if (prev != begin) out.push_back({{prev, begin}, false});
    out.push_back({{begin, end}, true});
    prev = end;
  }
  if (prev != length) out.push_back({{prev, length}, false});
  return out;
}

// Matches of a character predicate: each matching character is its own match.
std::vector<Span> char_matches(std::string_view text, const std::function<bool(char32_t)>& predicate) {
  std::vector<Span> matches;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t begin = pos;
    if (predicate(next_code_point(text, pos))) matches.emplace_back(begin, pos);
  }
  return matches;
}

// Applies `behavior` to the segments of one piece and appends the resulting non-empty pieces.
void split_piece(const Piece& piece, std::vector<Segment> segments, Behavior behavior, std::vector<Piece>& out) {
  std::vector<std::pair<Span, bool /*remove*/>> parts;
  switch (behavior) {
    case Behavior::Removed:
      for (auto& s : segments) parts.push_back({s.span, s.is_match});
      break;
    case Behavior::Isolated:
      for (auto& s : segments) parts.push_back({s.span, false});
      break;
    case Behavior::MergedWithPrevious: {
      bool previous_match = false;
      for (auto& s : segments) {
        if (s.is_match && !previous_match && !parts.empty()) parts.back().first.second = s.span.second;
        else parts.push_back({s.span, false});
        previous_match = s.is_match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool previous_match = false;  // walking right to left: "previous" is the segment to the right
      for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
        if (it->is_match && !previous_match && !parts.empty()) parts.back().first.first = it->span.first;
        else parts.push_back({it->span, false});
        previous_match = it->is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    }
    case Behavior::Contiguous: {
      bool previous_match = false;
      for (auto& s : segments) {
        if (s.is_match == previous_match && !parts.empty()) parts.back().first.second = s.span.second;
        else parts.push_back({s.span, false});
        previous_match = s.is_match;
      }
      break;
    }
  }
  for (auto& [span, remove] : parts) {
    if (remove || span.second <= span.first) continue;
    out.push_back({piece.text.substr(span.first, span.second - span.first), piece.at_origin && span.first == 0});
  }
}

template <class MatchFn>
void split_all(std::vector<Piece>& pieces, Behavior behavior, bool invert, MatchFn&& find) {
  std::vector<Piece> out;
  out.reserve(pieces.size());
  for (const auto& piece : pieces) {
    auto segments = segments_from_matches(piece.text.size(), find(piece.text));
    if (invert)
      for (auto& s : segments) s.is_match = !s.is_match;
    split_piece(piece, std::move(segments), behavior, out);
  }
  pieces = std::move(out);
}

Result<Behavior> parse_behavior(const std::string& name) {
  if (name == "Removed") return Behavior::Removed;
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  if (name == "Contiguous") return Behavior::Contiguous;
  return make_error("unknown split behavior '" + name + "'");
}

class Split final : public PreTokenizer {
 public:
  Split(Pattern pattern, Behavior behavior, bool invert) : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_all(pieces, behavior_, invert_, [&](const std::string& text) { return pattern_.find_all(text); });
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

class CharSplit final : public PreTokenizer {
 public:
  CharSplit(std::function<bool(char32_t)> predicate, Behavior behavior) : predicate_(std::move(predicate)), behavior_(behavior) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_all(pieces, behavior_, false, [&](const std::string& text) { return char_matches(text, predicate_); });
  }

 private:
  std::function<bool(char32_t)> predicate_;
  Behavior behavior_;
};

// GPT-2's word splitter, used by ByteLevel when use_regex is set.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, std::optional<Regex> regex) : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    if (add_prefix_space_)
      for (auto& piece : pieces)
        if (piece.text.empty() || piece.text[0] != ' ') piece.text.insert(0, 1, ' ');
    if (regex_) split_all(pieces, Behavior::Isolated, false, [&](const std::string& text) { return regex_->find_all(text); });
    for (auto& piece : pieces) piece.text = bytes_to_chars(piece.text);
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

enum class PrependScheme { Always, Never, First };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    Pattern space = Pattern::literal(" ");
    for (auto& piece : pieces) {
      piece.text = space.replace_all(piece.text, replacement_);
      bool starts_with_replacement = piece.text.compare(0, replacement_.size(), replacement_) == 0;
      bool prepend = scheme_ == PrependScheme::Always || (scheme_ == PrependScheme::First && piece.at_origin);
      if (prepend && !starts_with_replacement) piece.text.insert(0, replacement_);
    }
    if (split_) {
      Pattern delimiter = Pattern::literal(replacement_);
      split_all(pieces, Behavior::MergedWithNext, false, [&](const std::string& text) { return delimiter.find_all(text); });
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<Ptr> steps) : steps_(std::move(steps)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& step : steps_) step->pre_tokenize(pieces);
  }

 private:
  std::vector<Ptr> steps_;
};

}  // namespace

Result<std::unique_ptr<const PreTokenizer>> make_pre_tokenizer(const rapidjson::Value& spec) {
  if (spec.IsNull()) return Ptr{};
  if (!spec.IsObject()) return make_error("pre_tokenizer must be an object or null");
  std::string type = field_string(spec, "type");
  if (type == "Split") {
    if (!spec.HasMember("pattern")) return make_error("Split pre-tokenizer without a pattern");
    auto pattern = Pattern::from_json(spec["pattern"]);
    if (!pattern) return pattern.error();
    auto behavior = parse_behavior(field_string(spec, "behavior", "Isolated"));
    if (!behavior) return behavior.error();
    return Ptr(new Split(std::move(pattern).value(), *behavior, field_bool(spec, "invert", false)));
  }
  if (type == "ByteLevel") {
    std::optional<Regex> regex;
    if (field_bool(spec, "use_regex", true)) {
      auto compiled = Regex::compile(kGpt2Pattern);
      if (!compiled) return compiled.error();
      regex = std::move(compiled).value();
    }
    return Ptr(new ByteLevel(field_bool(spec, "add_prefix_space", true), std::move(regex)));
  }
  if (type == "Metaspace") {
    std::string replacement = field_string(spec, "replacement", "\xE2\x96\x81");
    // Older files carry add_prefix_space instead of prepend_scheme.
    PrependScheme scheme = field_bool(spec, "add_prefix_space", true) ? PrependScheme::Always : PrependScheme::Never;
    std::string name = field_string(spec, "prepend_scheme");
    if (name == "first") scheme = PrependScheme::First;
    else if (name == "always") scheme = PrependScheme::Always;
    else if (name == "never") scheme = PrependScheme::Never;
    else if (!name.empty()) return make_error("unknown Metaspace prepend_scheme '" + name + "'");
    return Ptr(new Metaspace(std::move(replacement), scheme, field_bool(spec, "split", true)));
  }
  if (type == "Digits") {
    bool individual = field_bool(spec, "individual_digits", false);
    return Ptr(new CharSplit(is_numeric, individual ? Behavior::Isolated : Behavior::Contiguous));
  }
  if (type == "Whitespace") {
    // HF's \w+|[^\w\s]+ with Oniguruma's Unicode \w (letters, marks, numbers, connector punctuation).
    auto regex = Regex::compile(R"([\p{L}\p{M}\p{N}\p{Pc}]+|[^\p{L}\p{M}\p{N}\p{Pc}\s]+)");
    if (!regex) return regex.error();
    return Ptr(new Split(Pattern::from_regex(std::move(regex).value()), Behavior::Removed, /*invert=*/true));
  }
  if (type == "WhitespaceSplit") return Ptr(new CharSplit(is_whitespace, Behavior::Removed));
  if (type == "Punctuation") {
    auto behavior = parse_behavior(field_string(spec, "behavior", "Isolated"));
    if (!behavior) return behavior.error();
    return Ptr(new CharSplit(is_punctuation, *behavior));
  }
  if (type == "CharDelimiterSplit") {
    std::string delimiter = field_string(spec, "delimiter");
    std::size_t pos = 0;
    char32_t cp = delimiter.empty() ? 0 : next_code_point(delimiter, pos);
    return Ptr(new CharSplit([cp](char32_t c) { return c == cp; }, Behavior::Removed));
  }
  if (type == "BertPreTokenizer") {
    std::vector<Ptr> steps;
    steps.emplace_back(new CharSplit(is_whitespace, Behavior::Removed));
    steps.emplace_back(new CharSplit(is_punctuation, Behavior::Isolated));
    return Ptr(new Sequence(std::move(steps)));
  }
  if (type == "Sequence") {
    const auto* list = field_array(spec, "pretokenizers");
    if (list == nullptr) return make_error("Sequence pre-tokenizer without \"pretokenizers\"");
    std::vector<Ptr> steps;
    for (const auto& item : list->GetArray()) {
      auto step = make_pre_tokenizer(item);
      if (!step) return step.error();
      if (*step) steps.push_back(std::move(step).value());
    }
    return Ptr(new Sequence(std::move(steps)));
  }
  return make_error("unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace sluice::tokenizer
