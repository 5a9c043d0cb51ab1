// The families that write each call as a JSON object {"name": …, "arguments": {…}}: Hermes/Qwen
// (one per <tool_call> block), Llama 3 (bare, or after <|python_tag|>; "parameters" for the
// arguments), and a JSON array of them after a marker: Mistral [TOOL_CALLS] (whose newer models write
// [TOOL_CALLS]NAME[ARGS]{…} instead), Granite 3 <|tool_call|>, Apriel <tool_calls>…</tool_calls>,
// Nemotron Nano 2 <TOOLCALL>…</TOOLCALL>.
#include "toolcall/syntax.h"

namespace sluice::toolcall {
namespace {

using R = Cursor::Result;

HeaderStep from_failure(R r, std::size_t marker_bytes) {
  return r == Cursor::kMore ? need_more() : no_call(marker_bytes);
}

// Reads `{ … "name": "NAME", "arguments"|"parameters": ` and stops on the arguments' '{'. Other keys
// before the arguments ("type": "function", "id") are skipped; the name must come before them.
R read_object_head(Cursor& c, std::string& name) {
  c.skip_space();
  if (R r = c.literal("{"); r != Cursor::kOk) return r;
  bool have_name = false;
  for (int key_count = 0; key_count < 8; ++key_count) {
    c.skip_space();
    if (key_count > 0) {
      if (R r = c.literal(","); r != Cursor::kOk) return r;
      c.skip_space();
    }
    std::string key;
    if (R r = c.json_string(key); r != Cursor::kOk) return r;
    c.skip_space();
    if (R r = c.literal(":"); r != Cursor::kOk) return r;
    c.skip_space();
    if (key == "name") {
      if (R r = c.json_string(name); r != Cursor::kOk) return r;
      if (name.empty()) return Cursor::kFail;
      have_name = true;
    } else if (key == "arguments" || key == "parameters") {
      if (!have_name) return Cursor::kFail;
      return expect_object_start(c);
    } else {
      if (R r = c.skip_json_value(); r != Cursor::kOk) return r;
    }
  }
  return Cursor::kFail;
}

// After the arguments: keys that may follow them (Mistral's "id") and the object's '}'.
R read_object_tail(Cursor& c) {
  for (int extra = 0; extra < 8; ++extra) {
    c.skip_space();
    if (c.done()) return c.at_end ? Cursor::kFail : Cursor::kMore;
    if (c.text[c.pos] == '}') {
      ++c.pos;
      return Cursor::kOk;
    }
    if (R r = c.literal(","); r != Cursor::kOk) return r;
    c.skip_space();
    std::string key;
    if (R r = c.json_string(key); r != Cursor::kOk) return r;
    c.skip_space();
    if (R r = c.literal(":"); r != Cursor::kOk) return r;
    if (R r = c.skip_json_value(); r != Cursor::kOk) return r;
  }
  return Cursor::kFail;
}

TrailerStep trailer_result(R r, const Cursor& c, bool more_calls) {
  TrailerStep t;
  if (r == Cursor::kMore) {
    t.need_more = true;
    return t;
  }
  t.consumed = c.pos;  // on failure: the closing text that did match is dropped, the rest is content
  t.more_calls = r == Cursor::kOk && more_calls;
  return t;
}

class Hermes final : public Syntax {
 public:
  static constexpr std::string_view kOpen = "<tool_call>";
  std::vector<std::string> triggers() const override { return {std::string(kOpen)}; }
  std::vector<std::string> markers() const override { return {"<tool_call>", "</tool_call>"}; }
  HeaderStep header(std::string_view text, bool continuation, bool at_end) const override {
    Cursor c{text, at_end};
    if (continuation) {  // only whitespace may separate calls of one block
      c.skip_space();
      if (c.done()) return at_end ? end_region(0) : need_more();
      if (R r = c.literal(kOpen); r != Cursor::kOk) return r == Cursor::kMore ? need_more() : end_region(0);
    } else if (R r = c.literal(kOpen); r != Cursor::kOk) {
      return from_failure(r, kOpen.size());
    }
    std::string name;
    if (R r = read_object_head(c, name); r != Cursor::kOk)
      return continuation ? (r == Cursor::kMore ? need_more() : end_region(0)) : from_failure(r, kOpen.size());
    return call(c.pos, std::move(name));
  }
  TrailerStep trailer(std::string_view text, bool at_end) const override {
    Cursor c{text, at_end};
    R r = read_object_tail(c);
    if (r == Cursor::kOk) {
      c.skip_space();
      r = c.literal("</tool_call>");
    }
    return trailer_result(r, c, /*more_calls=*/true);
  }
};

class Llama3 final : public Syntax {
 public:
  static constexpr std::string_view kTag = "<|python_tag|>";
  std::vector<std::string> triggers() const override { return {std::string(kTag)}; }
  std::vector<std::string> anchored_triggers() const override { return {"{"}; }
  HeaderStep header(std::string_view text, bool continuation, bool at_end) const override {
    Cursor c{text, at_end};
    std::size_t marker = 1;  // a bare '{'
    if (continuation) {  // several calls: separated by ';' or whitespace
      c.skip_space();
      if (!c.done() && c.text[c.pos] == ';') ++c.pos;
      c.skip_space();
      if (c.done()) return at_end ? end_region(0) : need_more();
      if (c.text[c.pos] != '{') return end_region(0);
    } else if (text.starts_with("<")) {
      if (R r = c.literal(kTag); r != Cursor::kOk) return from_failure(r, 1);
      marker = kTag.size();
    }
    std::string name;
    if (R r = read_object_head(c, name); r != Cursor::kOk)
      return continuation ? (r == Cursor::kMore ? need_more() : end_region(0)) : from_failure(r, marker);
    return call(c.pos, std::move(name));
  }
  TrailerStep trailer(std::string_view text, bool at_end) const override {
    Cursor c{text, at_end};
    R r = read_object_tail(c);
    return trailer_result(r, c, /*more_calls=*/true);
  }
};

// A JSON array of call objects after a marker (Mistral's first form, Granite 3, Apriel, Nemotron Nano 2);
// `close` is the marker some families put after the array.
HeaderStep array_call_header(Cursor& c, bool continuation, std::size_t marker, std::string_view close = {}) {
  c.skip_space();
  if (continuation) {
    if (c.done()) return c.at_end ? end_region(0) : need_more();
    if (c.text[c.pos] == ']') {
      ++c.pos;
      if (close.empty()) return end_region(c.pos);
      const std::size_t after_list = c.pos;
      c.skip_space();
      R r = c.literal(close);
      if (r == Cursor::kMore || (c.done() && !c.at_end)) return need_more();
      return end_region(r == Cursor::kOk ? c.pos : after_list);
    }
    if (c.text[c.pos] != ',') return end_region(0);
    ++c.pos;
  } else if (R r = c.literal("["); r != Cursor::kOk) {
    return from_failure(r, marker);
  }
  std::string name;
  if (R r = read_object_head(c, name); r != Cursor::kOk)
    return continuation ? (r == Cursor::kMore ? need_more() : end_region(0)) : from_failure(r, marker);
  return call(c.pos, std::move(name));
}

class Mistral final : public Syntax {
 public:
  static constexpr std::string_view kOpen = "[TOOL_CALLS]";
  std::vector<std::string> triggers() const override { return {std::string(kOpen)}; }
  std::vector<std::string> markers() const override { return {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"}; }
  HeaderStep header(std::string_view text, bool continuation, bool at_end) const override {
    Cursor c{text, at_end};
    if (continuation) return array_call_header(c, true, kOpen.size());
    if (R r = c.literal(kOpen); r != Cursor::kOk) return from_failure(r, kOpen.size());
    c.skip_space();
    if (c.done()) return at_end ? no_call(kOpen.size()) : need_more();
    if (c.text[c.pos] == '[') return array_call_header(c, false, kOpen.size());
    // The newer form: NAME[ARGS]{…}, or NAME[CALL_ID]ID[ARGS]{…}.
    std::string name;
    if (R r = c.word(kNameChars, name); r != Cursor::kOk) return from_failure(r, kOpen.size());
    std::size_t which = 0;
    if (R r = c.one_of({"[ARGS]", "[CALL_ID]"}, &which); r != Cursor::kOk) return from_failure(r, kOpen.size());
    if (which == 1) {
      std::string id;
      if (R r = c.until("[ARGS]", id, 64); r != Cursor::kOk) return from_failure(r, kOpen.size());
    }
    if (R r = expect_object_start(c); r != Cursor::kOk) return from_failure(r, kOpen.size());
    return call(c.pos, std::move(name));
  }
  TrailerStep trailer(std::string_view text, bool at_end) const override {
    // In the array form the call object closes (and a ',' or ']' follows); in the NAME[ARGS] form the
    // arguments were the whole call and a next one starts with its own [TOOL_CALLS].
    Cursor c{text, at_end};
    c.skip_space();
    if (c.done()) {
      if (!at_end) return TrailerStep{true, 0, false};
      return TrailerStep{};
    }
    if (c.text[c.pos] != '}' && c.text[c.pos] != ',') return TrailerStep{};
    c.pos = 0;
    R r = read_object_tail(c);
    return trailer_result(r, c, /*more_calls=*/true);
  }
};

class JsonList final : public Syntax {
 public:
  JsonList(std::string open, std::string close) : open_(std::move(open)), close_(std::move(close)) {}
  std::vector<std::string> triggers() const override { return {open_}; }
  std::vector<std::string> markers() const override {
    if (close_.empty()) return {open_};
    return {open_, close_};
  }
  HeaderStep header(std::string_view text, bool continuation, bool at_end) const override {
    Cursor c{text, at_end};
    if (!continuation) {
      if (R r = c.literal(open_); r != Cursor::kOk) return from_failure(r, open_.size());
    }
    return array_call_header(c, continuation, open_.size(), close_);
  }
  TrailerStep trailer(std::string_view text, bool at_end) const override {
    Cursor c{text, at_end};
    R r = read_object_tail(c);
    return trailer_result(r, c, /*more_calls=*/true);
  }

 private:
  std::string open_;
  std::string close_;
};

}  // namespace

std::unique_ptr<Syntax> make_json_family_syntax(Format format) {
  switch (format) {
    case Format::kHermes: return std::make_unique<Hermes>();
    case Format::kLlama3: return std::make_unique<Llama3>();
    case Format::kMistral: return std::make_unique<Mistral>();
    case Format::kGranite: return std::make_unique<JsonList>("<|tool_call|>", "");
    case Format::kApriel: return std::make_unique<JsonList>("<tool_calls>", "</tool_calls>");
    case Format::kNemotron: return std::make_unique<JsonList>("<TOOLCALL>", "</TOOLCALL>");
    default: return nullptr;
  }
}

}  // namespace sluice::toolcall
