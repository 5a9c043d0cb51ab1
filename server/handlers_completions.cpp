#include <algorithm>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "constrain/grammar_constraint.h"
#include "constrain/tool_call_grammar.h"
#include "util/json.h"
#include "engine/routing_key.h"
#include "model/model_config.h"
#include "server/generation_job.h"
#include "server/handlers.h"
#include "server/static_assets.h"
#include "tokenizer/tokenizer.h"

namespace sluice::server {
namespace {

// Validates the prompt against the context, builds the engine request and submits it. Returns the
// immediate error reply, or nullopt when the answer will come through the channel.
// `prompt_param` names the field an error about the prompt points at (messages or prompt).
using GrammarPtr = std::shared_ptr<const constrain::CompiledGrammar>;

// response_format's grammar (null: free text).
ApiResult<GrammarPtr> response_format_grammar(ServerContext& ctx, const CompletionParams& params) {
  if (!params.json_schema && !params.json_object) return GrammarPtr{};
  auto grammar = params.json_schema ? ctx.grammars.for_schema(*params.json_schema) : ctx.grammars.any_object();
  if (!grammar)
    return ApiError::bad_request("response_format: " + grammar.message(),
                                 params.json_schema ? "response_format.json_schema.schema" : "response_format");
  return *grammar;
}

// tool_choice required / named: calls of the (named) tools in the syntax forced_call_format picks.
ApiResult<GrammarPtr> forced_calls_grammar(ServerContext& ctx, const ChatRequest& chat, toolcall::Format format) {
  std::vector<constrain::ToolSchema> tools;
  std::string key = "tools:" + std::string(toolcall::format_name(format)) + (chat.parallel_tool_calls ? ":parallel:" : ":one:");
  for (const auto& tool : chat.tools.GetArray()) {
    const auto& function = tool["function"];
    std::string name = function["name"].GetString();
    if (chat.tool_choice == ToolChoice::kNamed && name != chat.forced_tool) continue;
    const rapidjson::Value* parameters = json::member(function, "parameters");
    tools.push_back({name, parameters});
    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
    if (parameters) parameters->Accept(writer);
    key += json::quote(name) + ":" + buffer.GetString() + ";";
  }
  auto grammar = ctx.grammars.get(key, [&]() -> Result<constrain::Grammar> {
    auto g = constrain::compile_tool_calls(format, tools, chat.parallel_tool_calls);
    if (!g) return g.error();
    return std::move(g->grammar);
  });
  if (!grammar) return ApiError::bad_request("tools: " + grammar.message(), "tools");
  return *grammar;
}

std::optional<Reply> start_generation(ServerContext& ctx, const CompletionParams& params,
                                      std::vector<int32_t> prompt_ids, JobSpec spec, const char* prompt_param,
                                      const std::shared_ptr<ResponseChannel>& channel, std::string_view session_id,
                                      GrammarPtr grammar) {
  if (ctx.draining.load()) return Reply::error(ApiError::draining());
  const int context = ctx.engine.context_size();
  const int prompt_tokens = static_cast<int>(prompt_ids.size());
  if (prompt_tokens == 0) return Reply::error(ApiError::bad_request("the prompt is empty", prompt_param));
  if (prompt_tokens >= context) {
    return Reply::error(ApiError{400,
                                 "the prompt is " + std::to_string(prompt_tokens) + " tokens; the context holds " +
                                     std::to_string(context),
                                 "invalid_request_error", prompt_param, "context_length_exceeded"});
  }
  // The KV pool (under --mem-limit it may hold less than a context): a request that could never get
  // its pages is refused now, naming the numbers; one without max_tokens gets what the pool leaves.
  const EngineMetrics m = ctx.engine.metrics();
  const int pool_tokens = static_cast<int>(std::min<uint64_t>(uint64_t(m.kv_pages_total) * m.kv_page_tokens, INT32_MAX));
  if (pool_tokens > 0 && pool_tokens < context) {
    if (prompt_tokens >= pool_tokens)
      return Reply::error(ApiError{400,
                                   "the prompt is " + std::to_string(prompt_tokens) + " tokens; under --mem-limit the KV cache holds " +
                                       std::to_string(pool_tokens) + " tokens",
                                   "invalid_request_error", prompt_param, "context_length_exceeded"});
    if (params.max_tokens_given && params.n * (prompt_tokens + params.max_tokens) > pool_tokens)
      return Reply::error(ApiError{400,
                                   "the prompt (" + std::to_string(prompt_tokens) + " tokens) and max_tokens (" +
                                       std::to_string(params.max_tokens) + ") need " + std::to_string(prompt_tokens + params.max_tokens) +
                                       " tokens of KV cache" + (params.n > 1 ? " for each of " + std::to_string(params.n) + " choices" : std::string()) + "; under --mem-limit it holds " + std::to_string(pool_tokens) +
                                       " (ask for at most " + std::to_string(std::max(0, pool_tokens / params.n - prompt_tokens)) + ")",
                                   "invalid_request_error", "max_tokens", "context_length_exceeded"});
  }
  const int room = pool_tokens > 0 ? std::min(context, pool_tokens) : context;
  const int vocab = ctx.engine.model_config().vocab_size;
  for (const auto& [id, bias] : params.sampling.logit_bias)
    if (vocab > 0 && id >= vocab)
      return Reply::error(ApiError::bad_request("logit_bias: token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                                    std::to_string(vocab - 1) + ")",
                                                "logit_bias"));
  // The routing key of the prompt's beginning (engine/routing_key.h), and the client's own session id
  // echoed, for a load balancer that keeps a conversation on the replica holding its pages.
  if (auto key = prefix_routing_key(prompt_ids)) channel->set_header("X-Sluice-Prefix-Key", routing_key_text(*key));
  if (!session_id.empty()) channel->set_header("X-Session-Id", std::string(session_id));
  if (!ctx.info.replica.empty()) channel->set_header("X-Sluice-Replica", ctx.info.replica);
  channel->note_prompt_tokens(prompt_tokens);
  auto request = std::make_shared<GenerationRequest>();
  // Structured outputs and forced calls: compiled (or found compiled) off the engine thread.
  if (grammar) request->constraint = std::make_shared<constrain::GrammarConstraint>(std::move(grammar));
  request->prompt_ids = std::move(prompt_ids);
  request->max_tokens = std::max(1, std::min(params.max_tokens, room - prompt_tokens));
  request->sampling = params.sampling;
  request->ignore_eos = params.ignore_eos;
  if (params.timeout_s) {
    request->deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(*params.timeout_s));
  }
  spec.n = params.n;
  spec.stream = params.stream;
  spec.include_usage = params.include_usage;
  spec.logprobs = params.logprobs;
  spec.top_logprobs = params.top_logprobs;
  spec.stop = params.stop;
  std::vector<std::unique_ptr<TokenText>> texts;  // a decoder per choice
  for (int c = 0; c < params.n; ++c) texts.push_back(make_token_text(ctx.engine.tokenizer(), ctx.engine.eos_ids()));
  auto job = std::make_shared<GenerationJob>(std::move(spec), std::move(texts), channel, &ctx.counters);
  job->attach(*request);
  if (Status submitted = ctx.engine.submit(std::move(request)); !submitted) {
    ++ctx.counters.rejected_overloaded;
    return Reply::error(ApiError::overloaded("the server is busy: " + submitted.message()));
  }
  return std::nullopt;
}

}  // namespace

// X-Session-Id as the client sent it, when it is short printable ASCII (it goes back in a header).
std::string_view session_id_of(const HttpRequest& req) {
  const auto it = req.find("X-Session-Id");
  if (it == req.end()) return {};
  const std::string_view v(it->value().data(), it->value().size());
  if (v.empty() || v.size() > 128) return {};
  for (char c : v)
    if (c < 0x21 || c > 0x7e) return {};
  return v;
}

std::optional<Reply> handle_chat_completions(ServerContext& ctx, const HttpRequest& req,
                                             const std::shared_ptr<ResponseChannel>& channel) {
  return start_chat_completion(ctx, req.body(), session_id_of(req), channel);
}

std::optional<Reply> start_chat_completion(ServerContext& ctx, std::string_view body, std::string_view session_id,
                                           const std::shared_ptr<ResponseChannel>& channel) {
  auto parsed = parse_chat_request(body, ctx.defaults);
  if (!parsed) return Reply::error(parsed.error());
  ChatRequest& chat = *parsed;
  auto prompt = ctx.chat.render(chat.messages, chat.tools.IsArray() ? &chat.tools : nullptr,
                                chat.add_generation_prompt.value_or(true), &chat.template_controls);
  if (!prompt) return Reply::error(ApiError::bad_request("chat template: " + prompt.message(), "messages"));
  std::vector<int32_t> ids = ctx.engine.tokenizer().encode(*prompt, /*add_special_tokens=*/false);
  JobSpec spec;
  spec.identity = make_identity(/*chat=*/true, ctx.info.model);
  spec.prompt_opened_think = prompt_opens_think(*prompt);
  spec.split_reasoning = ctx.chat.uses_think_tags() || spec.prompt_opened_think;
  // With tool_choice none the tools are still rendered (the model knows them) but nothing is parsed.
  const bool has_tools = chat.tools.IsArray() && !chat.tools.Empty();
  if (has_tools && chat.tool_choice == ToolChoice::kAuto) {
    spec.tool_format = ctx.chat.tool_format();
    spec.tool_argument_types = toolcall::ArgumentTypes::from_tools(chat.tools);
  }
  GrammarPtr grammar;
  if (has_tools && (chat.tool_choice == ToolChoice::kRequired || chat.tool_choice == ToolChoice::kNamed)) {
    // Forced calls: written in the template's syntax where it carries JSON arguments, else Hermes's.
    spec.tool_format = constrain::forced_call_format(ctx.chat.tool_format());
    spec.tool_argument_types = toolcall::ArgumentTypes::from_tools(chat.tools);
    auto forced = forced_calls_grammar(ctx, chat, spec.tool_format);
    if (!forced) return Reply::error(forced.error());
    grammar = std::move(*forced);
  } else {
    auto format = response_format_grammar(ctx, chat.params);
    if (!format) return Reply::error(format.error());
    grammar = std::move(*format);
  }
  spec.parallel_tool_calls = chat.parallel_tool_calls;
  return start_generation(ctx, chat.params, std::move(ids), std::move(spec), "messages", channel, session_id,
                          std::move(grammar));
}

std::optional<Reply> handle_completions(ServerContext& ctx, const HttpRequest& req,
                                        const std::shared_ptr<ResponseChannel>& channel) {
  auto parsed = parse_completion_request(req.body(), ctx.defaults);
  if (!parsed) return Reply::error(parsed.error());
  TextCompletionRequest& completion = *parsed;
  const Tokenizer& tok = ctx.engine.tokenizer();
  std::vector<int32_t> ids;
  if (completion.prompt_text) {
    ids = tok.encode(*completion.prompt_text, /*add_special_tokens=*/true);
  } else {
    const int vocab = ctx.engine.model_config().vocab_size;
    for (int32_t id : completion.prompt_ids) {
      if (id < 0 || (vocab > 0 && id >= vocab))
        return Reply::error(ApiError::bad_request("prompt token id " + std::to_string(id) + " is outside the vocabulary",
                                                  "prompt"));
    }
    ids = std::move(completion.prompt_ids);
  }
  JobSpec spec;
  spec.identity = make_identity(/*chat=*/false, ctx.info.model);
  if (completion.echo) spec.echo_text = completion.prompt_text ? *completion.prompt_text : tok.decode(ids);
  auto grammar = response_format_grammar(ctx, completion.params);
  if (!grammar) return Reply::error(grammar.error());
  return start_generation(ctx, completion.params, std::move(ids), std::move(spec), "prompt", channel, session_id_of(req),
                          std::move(*grammar));
}

Router make_router(ServerContext& ctx) {
  using V = http::verb;
  Router r;
  auto now = [&ctx](Reply (*f)(ServerContext&)) {
    return [&ctx, f](const HttpRequest&, const std::shared_ptr<ResponseChannel>&) -> std::optional<Reply> {
      return f(ctx);
    };
  };
  auto with_body = [&ctx](Reply (*f)(ServerContext&, const HttpRequest&)) {
    return [&ctx, f](const HttpRequest& req, const std::shared_ptr<ResponseChannel>&) -> std::optional<Reply> {
      return f(ctx, req);
    };
  };
  auto generate = [&ctx](auto f) {
    return [&ctx, f](const HttpRequest& req, const std::shared_ptr<ResponseChannel>& ch) { return f(ctx, req, ch); };
  };
  r.add(V::get, "/health", now(handle_health));
  r.add(V::get, "/v1/health", now(handle_health));
  r.add(V::get, "/v1/models", now(handle_models));
  r.add(V::get, "/models", now(handle_models));
  r.add_prefix(V::get, "/v1/models/", "/v1/models/{id}", with_body(handle_model));
  r.add_prefix(V::get, "/models/", "/models/{id}", with_body(handle_model));
  r.add(V::get, "/metrics", now(handle_metrics));
  r.add(V::post, "/admin/drain", now(handle_drain));
  // Everything with a body parses JSON and tokenizes or renders: off the I/O threads.
  r.add(V::post, "/tokenize", with_body(handle_tokenize), Work::kPool);
  r.add(V::post, "/detokenize", with_body(handle_detokenize), Work::kPool);
  r.add(V::post, "/apply-template", with_body(handle_apply_template), Work::kPool);
  r.add(V::post, "/v1/chat/completions", generate(handle_chat_completions), Work::kPool);
  r.add(V::post, "/chat/completions", generate(handle_chat_completions), Work::kPool);
  r.add(V::post, "/v1/completions", generate(handle_completions), Work::kPool);
  r.add(V::post, "/completions", generate(handle_completions), Work::kPool);
  r.add(V::post, "/v1/responses", generate(handle_responses), Work::kPool);
  r.add_prefix(V::get, "/v1/responses/", "/v1/responses/{id}", with_body(handle_get_response));
  r.add_prefix(V::delete_, "/v1/responses/", "/v1/responses/{id}", with_body(handle_delete_response));
  r.add(V::post, "/v1/messages", generate(handle_messages), Work::kPool);
  r.add(V::post, "/v1/messages/count_tokens", with_body(handle_count_tokens), Work::kPool);
  // The web app's.
  r.add(V::get, "/v1/server", now(handle_server_info));
  r.add(V::get, "/v1/hub/models", now(handle_cached_models), Work::kPool);      // reads the disk
  r.add(V::get, "/v1/hub/search", with_body(handle_hub_search), Work::kPool);   // waits on the hub
  r.add(V::post, "/v1/hub/downloads", with_body(handle_start_download), Work::kPool);
  r.add(V::get, "/v1/hub/downloads", now(handle_list_downloads));
  r.add_prefix(V::get, "/v1/hub/downloads/", "/v1/hub/downloads/{id}", with_body(handle_download));
  add_static_routes(r);  // the web chat app at /
  return r;
}

}  // namespace sluice::server
