#include "util/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <rapidjson/encodedstream.h>
#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "util/file_io.h"

namespace sluice::json {
namespace {

using rapidjson::SizeType;

// Builds the document from the reader's events, refusing the first event that breaks a limit.
// RapidJSON's default parser recurses once per nesting level; its iterative one, with these counters
// (depth, members or elements per container, total values, string length), keeps every stack and
// buffer here bounded by the limits rather than by the input.
class LimitedBuilder {
 public:
  LimitedBuilder(rapidjson::Document& doc, const JsonLimits& limits) : doc_(doc), limits_(limits) {
    // Reserved before the document's pool chunks: grown among them, this small block ends up at the
    // heap's top and every parse of a large file gave its pages back to the kernel and faulted them in
    // again (measured: 2.4x the page faults on a 19 MB tokenizer.json).
    open_.reserve(std::min<std::size_t>(limits.max_depth, 256));
  }

  bool Null() { return add_value() && doc_.Null(); }
  bool Bool(bool b) { return add_value() && doc_.Bool(b); }
  bool Int(int i) { return add_value() && doc_.Int(i); }
  bool Uint(unsigned u) { return add_value() && doc_.Uint(u); }
  bool Int64(int64_t i) { return add_value() && doc_.Int64(i); }
  bool Uint64(uint64_t u) { return add_value() && doc_.Uint64(u); }
  bool Double(double d) { return add_value() && doc_.Double(d); }
  // Numbers come as text (kParseNumbersAsStringsFlag) and are converted here: RapidJSON 1.1's own
  // full-precision conversion reads past its table of powers of ten on long significands with large
  // exponents and shifts by 64 on a zero significand (fuzz findings 5 and 7, perf/results/fuzz.md).
  bool RawNumber(const char* s, SizeType n, bool) { return add_value() && number(std::string_view(s, n)); }
  bool String(const char* s, SizeType n, bool copy) { return add_value() && string_fits(n) && doc_.String(s, n, copy); }
  bool Key(const char* s, SizeType n, bool copy) { return string_fits(n) && doc_.Key(s, n, copy); }
  bool StartObject() { return add_value() && open(/*is_array=*/false) && doc_.StartObject(); }
  bool EndObject(SizeType members) { return close() && doc_.EndObject(members); }
  bool StartArray() { return add_value() && open(/*is_array=*/true) && doc_.StartArray(); }
  bool EndArray(SizeType elements) { return close() && doc_.EndArray(elements); }

  // Empty unless a limit stopped the parse: then which one, in words.
  const std::string& violation() const { return violation_; }
  // Empty unless a number could not be stored: then why.
  const std::string& number_error() const { return number_error_; }

 private:
  struct Container {
    bool is_array;
    std::size_t size;
  };

  // Integers keep their exact value where int64/uint64 holds them (as RapidJSON stores them); everything
  // else is the correctly rounded double. A value past the double range is refused as RapidJSON does.
  bool number(std::string_view text) {
    const char* first = text.data();
    const char* last = first + text.size();
    if (text.find_first_of(".eE") == std::string_view::npos) {
      if (text.front() == '-') {
        int64_t i = 0;
        if (auto r = std::from_chars(first, last, i); r.ec == std::errc() && r.ptr == last) return doc_.Int64(i);
      } else {
        uint64_t u = 0;
        if (auto r = std::from_chars(first, last, u); r.ec == std::errc() && r.ptr == last) return doc_.Uint64(u);
      }
    }
    double d = 0;
    auto r = std::from_chars(first, last, d);
    if (r.ec == std::errc::result_out_of_range) {
      // Out of range either way: an underflow is zero (or a subnormal) as in json.loads, an overflow an error.
      d = std::strtod(std::string(text).c_str(), nullptr);
      if (std::isinf(d)) return bad_number("a number beyond the range of a double: " + std::string(text.substr(0, 40)));
    } else if (r.ec != std::errc() || r.ptr != last) {
      return bad_number("a number that does not convert: " + std::string(text.substr(0, 40)));
    }
    return doc_.Double(d);
  }

  bool add_value() {
    if (++values_ > limits_.max_values)
      return refuse("more than " + std::to_string(limits_.max_values) + " values (limit max_values)");
    if (open_.empty()) return true;
    Container& parent = open_.back();
    ++parent.size;
    if (parent.is_array && parent.size > limits_.max_array_elements)
      return refuse("an array of more than " + std::to_string(limits_.max_array_elements) +
                    " elements (limit max_array_elements)");
    if (!parent.is_array && parent.size > limits_.max_object_members)
      return refuse("an object of more than " + std::to_string(limits_.max_object_members) +
                    " members (limit max_object_members)");
    return true;
  }
  bool open(bool is_array) {
    if (open_.size() >= limits_.max_depth)
      return refuse("nesting deeper than " + std::to_string(limits_.max_depth) + " levels (limit max_depth)");
    open_.push_back({is_array, 0});
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }
  bool string_fits(SizeType length) {
    if (length <= limits_.max_string_bytes) return true;
    return refuse("a string of " + std::to_string(length) + " bytes, longer than " +
                  std::to_string(limits_.max_string_bytes) + " (limit max_string_bytes)");
  }
  bool bad_number(std::string why) {
    number_error_ = std::move(why);
    return false;
  }

  bool refuse(std::string why) {
    violation_ = std::move(why);
    return false;
  }

  rapidjson::Document& doc_;
  const JsonLimits& limits_;
  std::vector<Container> open_;
  std::size_t values_ = 0;
  std::string violation_;
  std::string number_error_;
};

}  // namespace

Result<rapidjson::Document> parse(std::string_view text, const std::string& what) {
  return parse(text, what, JsonLimits{});
}

Result<rapidjson::Document> parse(std::string_view text, const std::string& what, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes)
    return make_error(what + ": JSON text of " + std::to_string(text.size()) + " bytes is larger than " +
                      std::to_string(limits.max_bytes) + " (limit max_bytes)");
  constexpr unsigned kFlags = rapidjson::kParseIterativeFlag | rapidjson::kParseNumbersAsStringsFlag;
  rapidjson::Document doc;
  rapidjson::Reader reader;
  LimitedBuilder builder(doc, limits);
  auto generate = [&](rapidjson::Document&) {
    rapidjson::MemoryStream memory(text.data(), text.size());
    rapidjson::EncodedInputStream<rapidjson::UTF8<>, rapidjson::MemoryStream> input(memory);  // skips a BOM
    return !reader.Parse<kFlags>(input, builder).IsError();
  };
  doc.Populate(generate);
  if (reader.HasParseError()) {
    const std::string at = " at offset " + std::to_string(reader.GetErrorOffset());
    if (!builder.violation().empty()) return make_error(what + ": JSON over a limit" + at + ": " + builder.violation());
    if (!builder.number_error().empty()) return make_error(what + ": malformed JSON" + at + ": " + builder.number_error());
    return make_error(what + ": malformed JSON" + at + ": " + rapidjson::GetParseError_En(reader.GetParseErrorCode()));
  }
  return doc;
}

Result<rapidjson::Document> parse_file(const std::filesystem::path& path) { return parse_file(path, JsonLimits{}); }

Result<rapidjson::Document> parse_file(const std::filesystem::path& path, const JsonLimits& limits) {
  auto text = read_text_file(path, limits.max_bytes);
  if (!text) return text.error();
  return parse(*text, path.string(), limits);
}

const rapidjson::Value* member(const rapidjson::Value& object, const char* name) {
  if (!object.IsObject()) return nullptr;
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || it->value.IsNull()) return nullptr;
  return &it->value;
}

std::optional<double> number(const rapidjson::Value& object, const char* name) {
  const auto* v = member(object, name);
  if (!v || !v->IsNumber()) return std::nullopt;
  return v->GetDouble();
}

std::optional<long long> integer(const rapidjson::Value& object, const char* name) {
  const auto* v = member(object, name);
  if (!v || !v->IsInt64()) return std::nullopt;
  return v->GetInt64();
}

std::optional<bool> boolean(const rapidjson::Value& object, const char* name) {
  const auto* v = member(object, name);
  if (!v || !v->IsBool()) return std::nullopt;
  return v->GetBool();
}

std::optional<std::string> string(const rapidjson::Value& object, const char* name) {
  const auto* v = member(object, name);
  if (!v || !v->IsString()) return std::nullopt;
  return std::string(v->GetString(), v->GetStringLength());
}

std::string quote(std::string_view text) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  writer.String(text.data(), static_cast<rapidjson::SizeType>(text.size()));
  return std::string(buffer.GetString(), buffer.GetSize());
}

rapidjson::Value text_value(std::string_view text, rapidjson::Document::AllocatorType& allocator) {
  return rapidjson::Value(text.data(), static_cast<rapidjson::SizeType>(text.size()), allocator);
}

std::string serialize(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  value.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace sluice::json
