// JSON in (template variables) and out (the `tojson` filter). Output follows Python's
// json.dumps as transformers calls it: ensure_ascii=False, separators ", " / ": " (or "," with an
// indent), insertion order kept, floats in repr() form, NaN/Infinity spelled as Python does.
#include <cmath>
#include <cstdio>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "chat/budget.h"
#include "chat/builtins.h"
#include "chat/meter.h"

namespace sluice::chat {

namespace {

// Objects with more members than this index their keys to find repeats; smaller ones scan.
constexpr std::size_t kKeyIndexThreshold = 16;

Value from_json_at(const rapidjson::Value& json, int depth) {
  switch (json.GetType()) {
    case rapidjson::kNullType: return Value::none();
    case rapidjson::kFalseType: return Value(false);
    case rapidjson::kTrueType: return Value(true);
    case rapidjson::kStringType: return Value(std::string(json.GetString(), json.GetStringLength()));
    case rapidjson::kNumberType:
      if (json.IsInt64()) return Value(static_cast<std::int64_t>(json.GetInt64()));
      if (json.IsUint64()) return Value(static_cast<double>(json.GetUint64()));
      return Value(json.GetDouble());
    case rapidjson::kArrayType:
    case rapidjson::kObjectType: break;
  }
  // One native frame per level, bounded: the variables come from a request body.
  if (depth >= kMaxValueDepth)
    fail("ValueError: template variables nested deeper than " + std::to_string(kMaxValueDepth) + " levels");
  if (json.IsArray()) {
    std::vector<Value> items;
    items.reserve(json.Size());
    for (const auto& item : json.GetArray()) items.push_back(from_json_at(item, depth + 1));
    return Value::list(std::move(items));
  }
  // A repeated key keeps its first position and its last value, like json.loads; found through an
  // index so that many keys cost linear time.
  Value d = Value::dict();
  auto& items = d.as_dict()->items;
  const bool indexed = json.MemberCount() > kKeyIndexThreshold;
  std::unordered_map<std::string_view, std::size_t> position;
  if (indexed) position.reserve(json.MemberCount());
  for (auto it = json.MemberBegin(); it != json.MemberEnd(); ++it) {
    std::string_view key(it->name.GetString(), it->name.GetStringLength());
    Value value = from_json_at(it->value, depth + 1);
    std::size_t at = items.size();
    if (indexed) {
      at = position.emplace(key, items.size()).first->second;
    } else {
      for (std::size_t i = 0; i < items.size(); ++i)
        if (items[i].first.as_string() == key) at = i;
    }
    if (at < items.size()) items[at].second = std::move(value);
    else items.emplace_back(Value(std::string(key)), std::move(value));
  }
  return d;
}

}  // namespace

Value from_json(const rapidjson::Value& json) { return from_json_at(json, 0); }

namespace {

void append_escaped(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (std::size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    char buf[16];
    if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else if (c >= 0x80 && ensure_ascii) {
      // Decode one UTF-8 sequence and write it as \uXXXX (surrogate pair above the BMP).
      std::size_t n = (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
      char32_t cp = n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : n == 4 ? (c & 0x07) : c;
      for (std::size_t k = 1; k < n && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      i += n - 1;
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonOptions& o) : o_(o) {}

  void write(const Value& v, int level, std::string& out) {
    if (v.is_none()) out += "null";
    else if (v.is_bool()) out += v.as_bool() ? "true" : "false";
    else if (v.is_int()) out += std::to_string(v.as_int());
    else if (v.is_float()) out += json_float(v.as_float());
    else if (v.is_string()) append_escaped(out, v.as_string(), o_.ensure_ascii);
    else if (v.is_list() && !v.as_list()->is_generator) {
      const auto& items = v.as_list()->items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      Nested nested(*this, v.as_list().get(), level, items.size());
      out += '[';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += o_.item_separator;
        newline(level + 1, out);
        write(items[i], level + 1, out);
      }
      newline(level, out);
      out += ']';
    } else if (v.is_dict() && v.as_dict()->kind == DictObject::Kind::Dict) {
      if (v.as_dict()->items.empty()) {
        out += "{}";
        return;
      }
      Nested nested(*this, v.as_dict().get(), level, v.as_dict()->items.size());
      auto items = v.as_dict()->items;
      if (o_.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return compare(a.first, b.first) < 0; });
      }
      out += '{';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i) out += o_.item_separator;
        newline(level + 1, out);
        append_escaped(out, key_string(items[i].first), o_.ensure_ascii);
        out += o_.key_separator;
        write(items[i].second, level + 1, out);
      }
      newline(level, out);
      out += '}';
    } else {
      fail("TypeError: Object of type " + type_name(v) + " is not JSON serializable");
    }
    check_size(out.size(), "tojson output");
  }

 private:
  static std::string key_string(const Value& k) {
    if (k.is_string()) return k.as_string();
    if (k.is_bool()) return k.as_bool() ? "true" : "false";
    if (k.is_none()) return "null";
    if (k.is_int()) return std::to_string(k.as_int());
    if (k.is_float()) return json_float(k.as_float());
    fail("TypeError: keys must be str, int, float, bool or None, not " + type_name(k));
  }

  void newline(int level, std::string& out) const {
    if (!o_.indent) return;
    check_size(out.size() + 1 + checked_size(level, o_.indent->size(), "tojson indentation"), "tojson output");
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o_.indent;
  }

  // A container being written, for the span of its writing: seeing it again inside itself is
  // json.dumps' "Circular reference detected"; nesting is bounded like Python's recursion.
  class Nested {
   public:
    Nested(JsonWriter& w, const void* object, int level, std::size_t items) : w_(w), object_(object) {
      if (!w_.active_.insert(object_).second) fail("ValueError: Circular reference detected");
      if (level >= kMaxValueDepth) {
        w_.active_.erase(object_);
        fail("RecursionError: maximum recursion depth exceeded while encoding a JSON object");
      }
      charge_steps(1 + items);
    }
    ~Nested() { w_.active_.erase(object_); }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    JsonWriter& w_;
    const void* object_;
  };

  const JsonOptions& o_;
  std::unordered_set<const void*> active_;
};

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  JsonWriter(options).write(v, 0, out);
  return out;
}

}  // namespace sluice::chat
