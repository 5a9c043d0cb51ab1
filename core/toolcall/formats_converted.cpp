// Families whose arguments are not JSON as written: Qwen3-Coder's (and Seed-OSS's) XML parameters, GLM's key/value
// tags, Gemma 4's object notation (bare keys, <|"|> around strings). Their arguments are read up to
// the call's end marker and turned into a JSON object then, so they arrive in one piece in a stream.
#include <algorithm>

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "toolcall/syntax.h"

namespace sluice::toolcall {
namespace {

using R = Cursor::Result;

HeaderStep from_failure(R r, std::size_t marker_bytes) {
  return r == Cursor::kMore ? need_more() : no_call(marker_bytes);
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string json_quote(std::string_view s) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return {buffer.GetString(), buffer.GetSize()};
}

// A parameter's value. Declared a string: the text itself. Declared another type: the text as JSON
// when it parses so. Undeclared: JSON when it reads as a JSON number, literal, array or object, else
// the text as a string.
std::string json_value_of(std::string_view text, std::string_view declared = {}) {
  std::string_view t = trim(text);
  if (declared != "string" && !t.empty() && t.front() != '"') {
    rapidjson::Document doc;
    doc.Parse(t.data(), t.size());
    if (!doc.HasParseError()) return std::string(t);
  }
  std::string_view s = text;  // strings keep inner whitespace; the tags' own line breaks go
  if (s.starts_with("\n")) s.remove_prefix(1);
  if (s.ends_with("\n")) s.remove_suffix(1);
  return json_quote(s);
}

// Reads `open KEY close_key … VALUE close_value` pairs into a JSON object. Truncated text gives the
// pairs that are complete.
std::string pairs_to_json(std::string_view raw, std::string_view key_open, std::string_view key_close,
                          std::string_view value_open, std::string_view value_close, std::string_view function,
                          const ArgumentTypes& types) {
  std::string out = "{";
  bool first = true;
  std::size_t pos = 0;
  for (;;) {
    std::size_t k = raw.find(key_open, pos);
    if (k == std::string_view::npos) break;
    k += key_open.size();
    std::size_t ke = raw.find(key_close, k);
    if (ke == std::string_view::npos) break;
    std::string_view key = trim(raw.substr(k, ke - k));
    std::size_t v = ke + key_close.size();
    if (!value_open.empty()) {
      v = raw.find(value_open, v);
      if (v == std::string_view::npos) break;
      v += value_open.size();
    }
    std::size_t ve = raw.find(value_close, v);
    if (ve == std::string_view::npos) break;
    if (!first) out += ", ";
    first = false;
    out += json_quote(key);
    out += ": ";
    out += json_value_of(raw.substr(v, ve - v), types.type_of(function, key));
    pos = ve + value_close.size();
  }
  out += "}";
  return out;
}

// The opening of the next call in a block: whitespace, then `open`. False with `answer` set when
// that is not (yet) there: the block ends, or more text is needed.
bool continuation_open(Cursor& c, std::string_view open, HeaderStep& answer) {
  c.skip_space();
  if (c.done()) {
    answer = c.at_end ? end_region(0) : need_more();
    return false;
  }
  R r = c.literal(open);
  if (r == Cursor::kOk) return true;
  answer = r == Cursor::kMore ? need_more() : end_region(0);
  return false;
}

class QwenXml final : public Syntax {
 public:
  QwenXml(std::string open, std::string close) : open_(std::move(open)), close_(std::move(close)) {}
  std::vector<std::string> triggers() const override { return {open_}; }
  std::vector<std::string> markers() const override { return {open_, close_}; }
  HeaderStep header(std::string_view text, bool continuation, bool at_end) const override {
    Cursor c{text, at_end};
    if (continuation) {
      HeaderStep answer;
      if (!continuation_open(c, open_, answer)) return answer;
    } else if (R r = c.literal(open_); r != Cursor::kOk) {
      return from_failure(r, open_.size());
    }
    const std::size_t marker = c.pos;
    c.skip_space();
    if (R r = c.literal("<function="); r != Cursor::kOk)
      return continuation && r == Cursor::kFail ? end_region(0) : from_failure(r, marker);
    std::string name;
    if (R r = c.until(">", name, 256); r != Cursor::kOk) return from_failure(r, marker);
    if (trim(name).empty()) return no_call(marker);
    return call(c.pos, std::string(trim(name)), ArgsForm::kConverted, "</function>");
  }
  TrailerStep trailer(std::string_view text, bool at_end) const override {
    Cursor c{text, at_end};
    R r = c.literal("</function>");
    if (r == Cursor::kOk) {
      c.skip_space();
      r = c.literal(close_);
    }
    if (r == Cursor::kMore) return TrailerStep{true, 0, false};
    return TrailerStep{false, c.pos, r == Cursor::kOk};
  }
  std::string convert(std::string_view raw, std::string_view function, const ArgumentTypes& types) const override {
    return pairs_to_json(raw, "<parameter=", ">", "", "</parameter>", function, types);
  }

 private:
  std::string open_;
  std::string close_;
};

class Glm final : public Syntax {
 public:
  std::vector<std::string> triggers() const override { return {"<tool_call>"}; }
  std::vector<std::string> markers() const override {
    return {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
  }
  HeaderStep header(std::string_view text, bool continuation, bool at_end) const override {
    Cursor c{text, at_end};
    if (continuation) {
      HeaderStep answer;
      if (!continuation_open(c, "<tool_call>", answer)) return answer;
    } else if (R r = c.literal("<tool_call>"); r != Cursor::kOk) {
      return from_failure(r, 11);
    }
    const std::size_t marker = c.pos;
    // The name runs to the end of its line, or to the first argument / the end of the call.
    std::string_view rest = c.rest();
    std::size_t end = std::min({rest.find('\n'), rest.find("<arg_key>"), rest.find("</tool_call>")});
    if (end == std::string_view::npos) {
      if (at_end || rest.size() > 256) return no_call(marker);
      return need_more();
    }
    std::string_view name = trim(rest.substr(0, end));
    if (name.empty() || name.find_first_of("<>{}\"") != std::string_view::npos) return no_call(marker);
    return call(c.pos + end, std::string(name), ArgsForm::kConverted, "</tool_call>");
  }
  TrailerStep trailer(std::string_view text, bool at_end) const override {
    Cursor c{text, at_end};
    R r = c.literal("</tool_call>");
    if (r == Cursor::kMore) return TrailerStep{true, 0, false};
    return TrailerStep{false, c.pos, r == Cursor::kOk};
  }
  std::string convert(std::string_view raw, std::string_view function, const ArgumentTypes& types) const override {
    return pairs_to_json(raw, "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", function, types);
  }
};

// Gemma 4 writes {key:value,…} with bare keys, <|"|> around strings, and JSON numbers and literals.
class Gemma4 final : public Syntax {
 public:
  static constexpr std::string_view kOpen = "<|tool_call>";
  static constexpr std::string_view kClose = "<tool_call|>";
  static constexpr std::string_view kQuote = "<|\"|>";
  std::vector<std::string> triggers() const override { return {std::string(kOpen)}; }
  std::vector<std::string> markers() const override {
    return {std::string(kOpen), std::string(kClose), std::string(kQuote)};
  }
  HeaderStep header(std::string_view text, bool continuation, bool at_end) const override {
    Cursor c{text, at_end};
    if (continuation) {
      HeaderStep answer;
      if (!continuation_open(c, kOpen, answer)) return answer;
    } else if (R r = c.literal(kOpen); r != Cursor::kOk) {
      return from_failure(r, kOpen.size());
    }
    const std::size_t marker = c.pos;
    if (R r = c.literal("call:"); r != Cursor::kOk)
      return continuation && r == Cursor::kFail ? end_region(0) : from_failure(r, marker);
    std::string name;
    if (R r = c.word("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.", name); r != Cursor::kOk)
      return from_failure(r, marker);
    if (R r = c.literal("{"); r != Cursor::kOk) return from_failure(r, marker);
    return call(c.pos - 1, std::move(name), ArgsForm::kConverted, std::string(kClose));
  }
  TrailerStep trailer(std::string_view text, bool at_end) const override {
    Cursor c{text, at_end};
    R r = c.literal(kClose);
    if (r == Cursor::kMore) return TrailerStep{true, 0, false};
    return TrailerStep{false, c.pos, r == Cursor::kOk};
  }
  std::string convert(std::string_view raw, std::string_view, const ArgumentTypes&) const override {
    std::string out;
    std::size_t i = 0;
    // Bare words: keys (before ':') are quoted; values stay as they are when they are JSON numbers
    // or literals, and are quoted otherwise.
    auto bare = [&](std::size_t start) {
      std::size_t j = start;
      while (j < raw.size() && std::string_view("{}[],:").find(raw[j]) == std::string_view::npos &&
             !raw.substr(j).starts_with(kQuote))
        ++j;
      std::string_view word = trim(raw.substr(start, j - start));
      std::size_t k = j;
      while (k < raw.size() && is_space(raw[k])) ++k;
      bool is_key = k < raw.size() && raw[k] == ':';
      if (!word.empty()) out += is_key ? json_quote(word) : json_value_of(word);
      i = j;
    };
    while (i < raw.size()) {
      char ch = raw[i];
      if (raw.substr(i).starts_with(kQuote)) {
        std::size_t start = i + kQuote.size();
        std::size_t end = raw.find(kQuote, start);
        if (end == std::string_view::npos) end = raw.size();
        out += json_quote(raw.substr(start, end - start));
        i = std::min(raw.size(), end + kQuote.size());
      } else if (std::string_view("{}[],:").find(ch) != std::string_view::npos) {
        out += ch;
        ++i;
      } else if (is_space(ch)) {
        ++i;
      } else {
        bare(i);
      }
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Syntax> make_converted_family_syntax(Format format) {
  switch (format) {
    case Format::kQwenXml: return std::make_unique<QwenXml>("<tool_call>", "</tool_call>");
    case Format::kSeedXml: return std::make_unique<QwenXml>("<seed:tool_call>", "</seed:tool_call>");
    case Format::kGlm: return std::make_unique<Glm>();
    case Format::kGemma4: return std::make_unique<Gemma4>();
    default: return nullptr;
  }
}

}  // namespace sluice::toolcall
