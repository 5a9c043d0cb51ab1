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

// POST /tokenize, /detokenize, /apply-template (llama.cpp's shapes)
Reply handle_tokenize(ServerContext& ctx, const HttpRequest& req);
Reply handle_detokenize(ServerContext& ctx, const HttpRequest& req);
Reply handle_apply_template(ServerContext& ctx, const HttpRequest& req);

// POST /v1/chat/completions, /v1/completions
std::optional<Reply> handle_chat_completions(ServerContext& ctx, const HttpRequest& req,
                                             const std::shared_ptr<ResponseChannel>& channel);
std::optional<Reply> handle_completions(ServerContext& ctx, const HttpRequest& req,
                                        const std::shared_ptr<ResponseChannel>& channel);

// Every route (with the llama.cpp-style aliases /completions, /chat/completions, /models).
Router make_router(ServerContext& ctx);

}  // namespace sluice::server
