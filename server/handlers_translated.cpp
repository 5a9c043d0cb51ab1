// POST /v1/responses and POST /v1/messages: each API's request is translated into a chat completion
// request and served by the chat machinery; its answer comes back through a TranslatingChannel that
// reshapes it into the API's own objects and events. Also the stored responses (GET / DELETE
// /v1/responses/{id}) and /v1/messages/count_tokens.
#include "server/anthropic_request.h"
#include "server/anthropic_output.h"
#include "server/handlers.h"
#include "server/responses_output.h"
#include "server/responses_request.h"
#include "server/translating_channel.h"
#include "tokenizer/tokenizer.h"
#include "util/json.h"

namespace sluice::server {
namespace {

// The {id} of /v1/responses/{id}.
std::string response_id_of(const HttpRequest& req) {
  const std::string_view path = target_path(std::string_view(req.target().data(), req.target().size()));
  return percent_decoded(path.substr(std::string_view("/v1/responses/").size()));
}

ApiError response_not_found(const std::string& id) {
  return ApiError{404, "no stored response " + id, "invalid_request_error", "response_id", "response_not_found"};
}

}  // namespace

std::optional<Reply> handle_responses(ServerContext& ctx, const HttpRequest& req,
                                      const std::shared_ptr<ResponseChannel>& channel) {
  auto request = translate_responses_request(req.body(), &ctx.responses);
  if (!request) return Reply::error(request.error());
  auto translated = std::make_shared<TranslatingChannel>(
      channel, std::make_unique<ResponsesTranslator>(ctx.info.model, request->settings,
                                                     request->store ? &ctx.responses : nullptr,
                                                     std::move(request->conversation)));
  auto reply = start_chat_completion(ctx, request->chat_body, session_id_of(req), translated);
  if (reply && reply->status >= 400)
    return Reply::error(responses_error_from_chat(read_api_error(reply->status, reply->body)));
  return reply;
}

Reply handle_get_response(ServerContext& ctx, const HttpRequest& req) {
  const std::string id = response_id_of(req);
  auto stored = ctx.responses.get(id);
  if (!stored) return Reply::error(response_not_found(id));
  return Reply::json(std::move(stored->response));
}

Reply handle_delete_response(ServerContext& ctx, const HttpRequest& req) {
  const std::string id = response_id_of(req);
  if (!ctx.responses.erase(id)) return Reply::error(response_not_found(id));
  return Reply::json("{\"id\":" + json::quote(id) + ",\"object\":\"response\",\"deleted\":true}");
}

std::optional<Reply> handle_messages(ServerContext& ctx, const HttpRequest& req,
                                     const std::shared_ptr<ResponseChannel>& channel) {
  auto request = translate_messages_request(req.body());
  if (!request) return anthropic_error_reply(request.error());
  auto translated = std::make_shared<TranslatingChannel>(
      channel, std::make_unique<MessagesTranslator>(ctx.info.model));
  auto reply = start_chat_completion(ctx, request->chat_body, session_id_of(req), translated);
  if (reply && reply->status >= 400)
    return anthropic_error_reply(messages_error_from_chat(read_api_error(reply->status, reply->body)));
  return reply;
}

Reply handle_count_tokens(ServerContext& ctx, const HttpRequest& req) {
  auto request = translate_messages_request(req.body(), /*counting=*/true);
  if (!request) return anthropic_error_reply(request.error());
  auto chat = parse_chat_request(request->chat_body, ctx.defaults);
  if (!chat) return anthropic_error_reply(messages_error_from_chat(chat.error()));
  auto prompt = ctx.chat.render(chat->messages, chat->tools.IsArray() ? &chat->tools : nullptr, true,
                                &chat->template_controls);
  if (!prompt) return anthropic_error_reply(ApiError::bad_request("chat template: " + prompt.message(), "messages"));
  const auto ids = ctx.engine.tokenizer().encode(*prompt, /*add_special_tokens=*/false);
  return Reply::json("{\"input_tokens\":" + std::to_string(ids.size()) + "}");
}

}  // namespace sluice::server
