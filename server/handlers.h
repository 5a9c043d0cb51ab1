#pragma once
// The endpoints. Each takes the request (and, for completions, the channel it answers through later).
#include "server/context.h"
#include "server/router.h"

namespace sluice::server {

// GET /health, GET /v1/models, GET /metrics
Reply handle_health(ServerContext& ctx);
Reply handle_models(ServerContext& ctx);
// GET /v1/models/{id}: the served model's object, or a 404 model_not_found for any other id.
Reply handle_model(ServerContext& ctx, const HttpRequest& req);
Reply handle_metrics(ServerContext& ctx);
// POST /admin/drain: stop admitting, finish what is in flight (within --shutdown-grace), exit.
Reply handle_drain(ServerContext& ctx);

// POST /tokenize, /detokenize, /apply-template (llama.cpp's shapes)
Reply handle_tokenize(ServerContext& ctx, const HttpRequest& req);
Reply handle_detokenize(ServerContext& ctx, const HttpRequest& req);
Reply handle_apply_template(ServerContext& ctx, const HttpRequest& req);

// POST /v1/chat/completions, /v1/completions
std::optional<Reply> handle_chat_completions(ServerContext& ctx, const HttpRequest& req,
                                             const std::shared_ptr<ResponseChannel>& channel);
// X-Session-Id as the client sent it, when it is short printable ASCII (echoed back); "" otherwise.
std::string_view session_id_of(const HttpRequest& req);
// The chat completion behind every chat-shaped API: /v1/chat/completions itself, and the Responses and
// Messages APIs, which translate their requests into a chat body and read the answer back through a
// translating channel (translating_channel.h).
std::optional<Reply> start_chat_completion(ServerContext& ctx, std::string_view chat_body, std::string_view session_id,
                                           const std::shared_ptr<ResponseChannel>& channel);
// POST /v1/responses (OpenAI's Responses API) and POST /v1/messages (Anthropic's Messages API).
std::optional<Reply> handle_responses(ServerContext& ctx, const HttpRequest& req,
                                      const std::shared_ptr<ResponseChannel>& channel);
std::optional<Reply> handle_messages(ServerContext& ctx, const HttpRequest& req,
                                     const std::shared_ptr<ResponseChannel>& channel);
// GET / DELETE /v1/responses/{id}: a stored response object, or forgetting it (404 when not stored).
Reply handle_get_response(ServerContext& ctx, const HttpRequest& req);
Reply handle_delete_response(ServerContext& ctx, const HttpRequest& req);
// POST /v1/messages/count_tokens: {"input_tokens": N}, the prompt a Messages request would render to.
Reply handle_count_tokens(ServerContext& ctx, const HttpRequest& req);
std::optional<Reply> handle_completions(ServerContext& ctx, const HttpRequest& req,
                                        const std::shared_ptr<ResponseChannel>& channel);

// The web app's: GET /v1/server (what runs: model, codecs, defaults, memory plan), GET /v1/hub/models
// (the local cache, with fits), GET /v1/hub/search?q=&limit=, POST /v1/hub/downloads {"model"},
// GET /v1/hub/downloads, GET /v1/hub/downloads/{id}.
Reply handle_server_info(ServerContext& ctx);
Reply handle_cached_models(ServerContext& ctx);
Reply handle_hub_search(ServerContext& ctx, const HttpRequest& req);
Reply handle_start_download(ServerContext& ctx, const HttpRequest& req);
Reply handle_list_downloads(ServerContext& ctx);
Reply handle_download(ServerContext& ctx, const HttpRequest& req);

// Every route (with the llama.cpp-style aliases /completions, /chat/completions, /models).
Router make_router(ServerContext& ctx);

}  // namespace sluice::server
