#include "tokenizer/decoders.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace sluice::tokenizer {
namespace {

using Ptr = std::unique_ptr<const Decoder>;

// Maps byte-level characters back to bytes; a token holding any other character is taken as its
// own UTF-8 (added tokens are not byte-level encoded). Invalid UTF-8 becomes U+FFFD.
class ByteLevel final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    std::string token_bytes;
    for (const auto& token : tokens) {
      token_bytes.clear();
      bool all_mapped = true;
      for (std::size_t pos = 0; pos < token.size() && all_mapped;) {
        auto byte = char_to_byte(next_code_point(token, pos));
        if (byte) token_bytes.push_back(static_cast<char>(*byte));
        else all_mapped = false;
      }
      bytes += all_mapped ? token_bytes : token;
    }
    return {utf8_lossy(bytes)};
  }
  std::string piece_bytes(std::string token) const override {
    std::string bytes;
    for (std::size_t pos = 0; pos < token.size();) {
      auto byte = char_to_byte(next_code_point(token, pos));
      if (!byte) return token;  // not byte-level encoded: its own UTF-8
      bytes.push_back(static_cast<char>(*byte));
    }
    return bytes;
  }
};

// SentencePiece-style "<0xNN>" tokens back to bytes; a run that is not valid UTF-8 becomes one
// U+FFFD per byte.
class ByteFallback final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    std::size_t run_length = 0;
    auto flush = [&] {
      if (run_length == 0) return;
      if (is_valid_utf8(run)) {
        out.push_back(run);
      } else {
        for (std::size_t i = 0; i < run_length; ++i) out.emplace_back(kReplacementChar);
      }
      run.clear();
      run_length = 0;
    };
    for (auto& token : tokens) {
      if (auto byte = parse_byte_token(token)) {
        run.push_back(static_cast<char>(*byte));
        ++run_length;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    return out;
  }
  std::string piece_bytes(std::string token) const override {
    if (auto byte = parse_byte_token(token)) return std::string(1, static_cast<char>(*byte));
    return token;
  }

  static std::optional<unsigned char> parse_byte_token(const std::string& token) {
    if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return std::nullopt;
    auto hex = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = hex(token[3]), lo = hex(token[4]);
    if (hi < 0 || lo < 0) return std::nullopt;
    return static_cast<unsigned char>(hi * 16 + lo);
  }
};

class Fuse final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string joined;
    for (const auto& token : tokens) joined += token;
    return {std::move(joined)};
  }
};

// Removes up to `start` leading and `stop` trailing `content` characters from each token.
class Strip final : public Decoder {
 public:
  Strip(char32_t content, std::size_t start, std::size_t stop) : content_(content), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& token : tokens) {
      std::vector<std::size_t> boundaries;  // byte offset of each character, then the end
      std::vector<char32_t> chars;
      for (std::size_t pos = 0; pos < token.size();) {
        boundaries.push_back(pos);
        chars.push_back(next_code_point(token, pos));
      }
      boundaries.push_back(token.size());
      std::size_t first = 0, last = chars.size();
      while (first < start_ && first < chars.size() && chars[first] == content_) ++first;
      for (std::size_t i = 0; i < stop_ && last > first && chars[last - 1] == content_; ++i) --last;
      token = token.substr(boundaries[first], boundaries[last] - boundaries[first]);
    }
    return tokens;
  }
  std::size_t unstable_tail_chars() const override { return stop_; }
  std::string piece_bytes(std::string token) const override { return token; }  // trims apply at the text's ends

 private:
  char32_t content_;
  std::size_t start_, stop_;
};

class Replace final : public Decoder {
 public:
  Replace(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& token : tokens) token = pattern_.replace_all(token, content_);
    return tokens;
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Every replacement character of the first token is dropped (HF drops them all, not only the
// leading one, when a prefix space was prepended); elsewhere it becomes a space.
class Metaspace final : public Decoder {
 public:
  Metaspace(char32_t replacement, bool drop_in_first) : replacement_(replacement), drop_in_first_(drop_in_first) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      for (std::size_t pos = 0; pos < tokens[i].size();) {
        char32_t cp = next_code_point(tokens[i], pos);
        if (cp != replacement_) append_utf8(out, cp);
        else if (!(i == 0 && drop_in_first_)) out.push_back(' ');
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }
  std::string piece_bytes(std::string token) const override {
    std::string out;
    for (std::size_t pos = 0; pos < token.size();) {
      char32_t cp = next_code_point(token, pos);
      if (cp != replacement_) append_utf8(out, cp);
      else out.push_back(' ');
    }
    return out;
  }

 private:
  char32_t replacement_;
  bool drop_in_first_;
};

// Classic BPE end-of-word suffix ("</w>") becomes a space, except on the last token.
class BpeSuffix final : public Decoder {
 public:
  explicit BpeSuffix(std::string suffix) : suffix_(std::move(suffix)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = Pattern::literal(suffix_).replace_all(tokens[i], i + 1 == tokens.size() ? "" : " ");
    return tokens;
  }
  std::string piece_bytes(std::string token) const override { return Pattern::literal(suffix_).replace_all(token, " "); }

 private:
  std::string suffix_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<Ptr> steps) : steps_(std::move(steps)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& step : steps_) tokens = step->decode_chain(std::move(tokens));
    return tokens;
  }
  std::size_t unstable_tail_chars() const override {
    std::size_t n = 0;
    for (const auto& step : steps_) n += step->unstable_tail_chars();
    return n;
  }
  std::string piece_bytes(std::string token) const override {
    for (const auto& step : steps_) token = step->piece_bytes(std::move(token));
    return token;
  }

 private:
  std::vector<Ptr> steps_;
};

char32_t first_code_point(const std::string& text, char32_t fallback) {
  std::size_t pos = 0;
  return text.empty() ? fallback : next_code_point(text, pos);
}

}  // namespace

Result<std::unique_ptr<const Decoder>> make_decoder(const rapidjson::Value& spec) {
  if (spec.IsNull()) return Ptr{};
  if (!spec.IsObject()) return make_error("decoder must be an object or null");
  std::string type = field_string(spec, "type");
  if (type == "ByteLevel") return Ptr(new ByteLevel());
  if (type == "ByteFallback") return Ptr(new ByteFallback());
  if (type == "Fuse") return Ptr(new Fuse());
  if (type == "Strip") {
    char32_t content = first_code_point(field_string(spec, "content", " "), U' ');
    return Ptr(new Strip(content, static_cast<std::size_t>(field_int(spec, "start", 0)), static_cast<std::size_t>(field_int(spec, "stop", 0))));
  }
  if (type == "Replace") {
    if (!spec.HasMember("pattern")) return make_error("Replace decoder without a pattern");
    auto pattern = Pattern::from_json(spec["pattern"]);
    if (!pattern) return pattern.error();
    return Ptr(new Replace(std::move(pattern).value(), field_string(spec, "content")));
  }
  if (type == "Metaspace") {
    char32_t replacement = first_code_point(field_string(spec, "replacement", "\xE2\x96\x81"), 0x2581);
    bool prepend = field_bool(spec, "add_prefix_space", true);
    std::string scheme = field_string(spec, "prepend_scheme");
    if (!scheme.empty()) prepend = scheme != "never";
    return Ptr(new Metaspace(replacement, prepend));
  }
  if (type == "BPEDecoder") return Ptr(new BpeSuffix(field_string(spec, "suffix", "</w>")));
  if (type == "Sequence") {
    const auto* list = field_array(spec, "decoders");
    if (list == nullptr) return make_error("Sequence decoder without \"decoders\"");
    std::vector<Ptr> steps;
    for (const auto& item : list->GetArray()) {
      auto step = make_decoder(item);
      if (!step) return step.error();
      if (*step) steps.push_back(std::move(step).value());
    }
    return Ptr(new Sequence(std::move(steps)));
  }
  return make_error("unsupported decoder type '" + type + "'");
}

}  // namespace sluice::tokenizer
