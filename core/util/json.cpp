#include "util/json.h"

#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "util/file_io.h"

namespace sluice::json {

Result<rapidjson::Document> parse(std::string_view text, const std::string& what) {
  rapidjson::Document doc;
  doc.Parse<rapidjson::kParseFullPrecisionFlag>(text.data(), text.size());
  if (doc.HasParseError()) {
    return make_error(what + ": malformed JSON at offset " + std::to_string(doc.GetErrorOffset()) + ": " +
                      rapidjson::GetParseError_En(doc.GetParseError()));
  }
  return doc;
}

Result<rapidjson::Document> parse_file(const std::filesystem::path& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return parse(*text, path.string());
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

}  // namespace sluice::json
