#pragma once
// Lenient field access for tokenizer.json: absent or null fields take the default HF gives them.
#include <cstdint>
#include <string>

#include <rapidjson/document.h>

namespace sluice::tokenizer {

// Token ids a tokenizer.json may use: 0 .. 2^22 - 1, far above any real vocabulary (~262K), so
// that tables indexed by id (32 bytes a slot) stay within 128 MiB whatever a file claims.
inline constexpr int32_t kTokenIdLimit = 1 << 22;
inline bool is_token_id(const rapidjson::Value& v) { return v.IsInt() && v.GetInt() >= 0 && v.GetInt() < kTokenIdLimit; }
inline std::string token_id_rule() { return "an integer from 0 to " + std::to_string(kTokenIdLimit - 1); }

inline std::string field_string(const rapidjson::Value& object, const char* name, std::string fallback = {}) {
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || !it->value.IsString()) return fallback;
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

inline bool field_bool(const rapidjson::Value& object, const char* name, bool fallback) {
  auto it = object.FindMember(name);
  return it == object.MemberEnd() || !it->value.IsBool() ? fallback : it->value.GetBool();
}

inline long long field_int(const rapidjson::Value& object, const char* name, long long fallback) {
  auto it = object.FindMember(name);
  return it == object.MemberEnd() || !it->value.IsInt64() ? fallback : it->value.GetInt64();
}

inline const rapidjson::Value* field_array(const rapidjson::Value& object, const char* name) {
  auto it = object.FindMember(name);
  return it == object.MemberEnd() || !it->value.IsArray() ? nullptr : &it->value;
}

inline const rapidjson::Value* field(const rapidjson::Value& object, const char* name) {
  auto it = object.FindMember(name);
  return it == object.MemberEnd() || it->value.IsNull() ? nullptr : &it->value;
}

}  // namespace sluice::tokenizer
