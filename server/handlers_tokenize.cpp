#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "model/model_config.h"
#include "server/handlers.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

namespace sluice::server {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

std::string to_text(const rapidjson::StringBuffer& b) { return {b.GetString(), b.GetSize()}; }
void str(Writer& w, const std::string& s) { w.String(s.data(), static_cast<rapidjson::SizeType>(s.size())); }

}  // namespace

Reply handle_tokenize(ServerContext& ctx, const HttpRequest& req) {
  auto body = parse_body_object(req.body());
  if (!body) return Reply::error(body.error());
  auto content = json::string(*body, "content");
  if (!content) return Reply::error(ApiError::bad_request("content must be a string", "content"));
  auto add_special_field = optional_boolean(*body, "add_special");
  if (!add_special_field) return Reply::error(add_special_field.error());
  auto with_pieces_field = optional_boolean(*body, "with_pieces");
  if (!with_pieces_field) return Reply::error(with_pieces_field.error());
  const bool add_special = add_special_field->value_or(false);
  const bool with_pieces = with_pieces_field->value_or(false);
  const Tokenizer& tok = ctx.engine.tokenizer();
  const std::vector<int32_t> ids = tok.encode(*content, add_special);
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("tokens");
  w.StartArray();
  for (int32_t id : ids) {
    if (!with_pieces) {
      w.Int(id);
      continue;
    }
    w.StartObject();
    w.Key("id"), w.Int(id);
    w.Key("piece"), str(w, tok.decode(std::vector<int32_t>{id}));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Reply::json(to_text(buffer));
}

Reply handle_detokenize(ServerContext& ctx, const HttpRequest& req) {
  auto body = parse_body_object(req.body());
  if (!body) return Reply::error(body.error());
  const auto* tokens = json::member(*body, "tokens");
  if (!tokens || !tokens->IsArray()) return Reply::error(ApiError::bad_request("tokens must be an array", "tokens"));
  const int vocab = ctx.engine.model_config().vocab_size;
  std::vector<int32_t> ids;
  for (const auto& t : tokens->GetArray()) {
    if (!t.IsInt() || t.GetInt() < 0 || (vocab > 0 && t.GetInt() >= vocab))
      return Reply::error(ApiError::bad_request("tokens must be token ids below " + std::to_string(vocab), "tokens"));
    ids.push_back(t.GetInt());
  }
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("content"), str(w, ctx.engine.tokenizer().decode(ids));
  w.EndObject();
  return Reply::json(to_text(buffer));
}

Reply handle_apply_template(ServerContext& ctx, const HttpRequest& req) {
  auto body = parse_body_object(req.body());
  if (!body) return Reply::error(body.error());
  const auto* messages = json::member(*body, "messages");
  if (!messages) return Reply::error(ApiError::bad_request("messages is required", "messages"));
  rapidjson::Document normalized;
  if (auto err = normalize_messages(*messages, normalized)) return Reply::error(*err);
  const auto* tools = json::member(*body, "tools");
  if (tools && !tools->IsArray()) return Reply::error(ApiError::bad_request("tools must be an array", "tools"));
  auto add_generation_prompt = optional_boolean(*body, "add_generation_prompt");
  if (!add_generation_prompt) return Reply::error(add_generation_prompt.error());
  auto controls = parse_template_controls(*body);
  if (!controls) return Reply::error(controls.error());
  auto prompt = ctx.chat.render(normalized, tools, add_generation_prompt->value_or(true), &*controls);
  if (!prompt) return Reply::error(ApiError::bad_request("chat template: " + prompt.message(), "messages"));
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("prompt"), str(w, *prompt);
  w.EndObject();
  return Reply::json(to_text(buffer));
}

}  // namespace sluice::server
