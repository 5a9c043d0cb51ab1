#include "tokenizer/normalizers.h"

#include <cstdlib>
#include <vector>

#include <utf8proc.h>

#include "tokenizer/json_fields.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode.h"

namespace sluice::tokenizer {
namespace {

class UnicodeNormalization final : public Normalizer {
 public:
  explicit UnicodeNormalization(int options) : options_(options) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return {};
    utf8proc_uint8_t* mapped = nullptr;
    auto length = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                               &mapped, static_cast<utf8proc_option_t>(options_));
    if (length < 0) return std::string(text);  // input is validated upstream; keep it unchanged if not
    std::string out(reinterpret_cast<char*>(mapped), static_cast<std::size_t>(length));
    std::free(mapped);
    return out;
  }

 private:
  int options_;
};

class Lowercase final : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override {
    std::string out;
    out.reserve(text.size());
    for (std::size_t pos = 0; pos < text.size();) {
      char32_t cp = next_code_point(text, pos);
      if (cp == 0x130) {  // the one unconditional multi-character lowercase (Rust's char::to_lowercase)
        out.append("i\xCC\x87");
        continue;
      }
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    return out;
  }
};

class StripAccents final : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override {
    std::string out;
    out.reserve(text.size());
    for (std::size_t pos = 0; pos < text.size();) {
      char32_t cp = next_code_point(text, pos);
      if (utf8proc_category(static_cast<utf8proc_int32_t>(cp)) != UTF8PROC_CATEGORY_MN) append_utf8(out, cp);
    }
    return out;
  }
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return {};  // HF prepends only to non-empty pieces
    return prefix_ + std::string(text);
  }

 private:
  std::string prefix_;
};

class Replace final : public Normalizer {
 public:
  Replace(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string normalize(std::string_view text) const override { return pattern_.replace_all(text, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override {
    std::size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        std::size_t next = begin;
        if (!is_whitespace(next_code_point(text, next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        std::size_t start = end - 1;
        while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
        std::size_t probe = start;
        if (!is_whitespace(next_code_point(text, probe))) break;
        end = start;
      }
    }
    return std::string(text.substr(begin, end - begin));
  }

 private:
  bool left_, right_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<const Normalizer>> steps) : steps_(std::move(steps)) {}
  std::string normalize(std::string_view text) const override {
    std::string current(text);
    for (const auto& step : steps_) current = step->normalize(current);
    return current;
  }

 private:
  std::vector<std::unique_ptr<const Normalizer>> steps_;
};

}  // namespace

Result<std::unique_ptr<const Normalizer>> make_normalizer(const rapidjson::Value& spec) {
  using Ptr = std::unique_ptr<const Normalizer>;
  if (spec.IsNull()) return Ptr{};
  if (!spec.IsObject()) return make_error("normalizer must be an object or null");
  std::string type = field_string(spec, "type");
  if (type == "NFC") return Ptr(new UnicodeNormalization(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (type == "NFD") return Ptr(new UnicodeNormalization(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
  if (type == "NFKC") return Ptr(new UnicodeNormalization(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  if (type == "NFKD") return Ptr(new UnicodeNormalization(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  if (type == "Lowercase") return Ptr(new Lowercase());
  if (type == "StripAccents") return Ptr(new StripAccents());
  if (type == "Prepend") return Ptr(new Prepend(field_string(spec, "prepend")));
  if (type == "Strip") return Ptr(new Strip(field_bool(spec, "strip_left", true), field_bool(spec, "strip_right", true)));
  if (type == "Replace") {
    if (!spec.HasMember("pattern")) return make_error("Replace normalizer without a pattern");
    auto pattern = Pattern::from_json(spec["pattern"]);
    if (!pattern) return pattern.error();
    return Ptr(new Replace(std::move(pattern).value(), field_string(spec, "content")));
  }
  if (type == "Sequence") {
    const auto* list = field_array(spec, "normalizers");
    if (list == nullptr) return make_error("Sequence normalizer without \"normalizers\"");
    std::vector<Ptr> steps;
    for (const auto& item : list->GetArray()) {
      auto step = make_normalizer(item);
      if (!step) return step.error();
      if (*step) steps.push_back(std::move(step).value());
    }
    return Ptr(new Sequence(std::move(steps)));
  }
  return make_error("unsupported normalizer type '" + type + "'");
}

}  // namespace sluice::tokenizer
