#include <chrono>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "server/handlers.h"

namespace sluice::server {
namespace {

std::string to_text(const rapidjson::StringBuffer& b) { return {b.GetString(), b.GetSize()}; }

}  // namespace

Reply handle_drain(ServerContext& ctx) {
  // Without an API key anyone who reaches the port could stop the server: draining then takes a
  // signal (SIGTERM) from whoever runs it.
  if (ctx.options.api_key.empty())
    return Reply::error(ApiError{403, "POST /admin/drain needs the server started with --api-key; or send it SIGTERM",
                                 "permission_error", "", "drain_needs_api_key"});
  if (ctx.request_drain) ctx.request_drain();
  const EngineMetrics m = ctx.engine.metrics();
  return {202, "{\"status\":\"draining\",\"active\":" + std::to_string(m.active_sequences) + ",\"queued\":" +
                   std::to_string(m.queue_depth) + "}"};
}

Reply handle_health(ServerContext& ctx) {
  const EngineMetrics m = ctx.engine.metrics();
  const bool draining = ctx.draining.load();
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  // A balancer's health check: 503 while draining, so it sends new work elsewhere.
  w.Key("status"), w.String(draining ? "draining" : "ok");
  if (draining) w.Key("reason"), w.String("draining: finishing the requests in flight, then stopping");
  w.Key("model"), w.String(ctx.info.model.c_str());
  w.Key("backend"), w.String(ctx.info.backend.c_str());
  w.Key("devices");
  w.StartArray();
  w.StartObject();
  w.Key("name"), w.String(ctx.info.backend.c_str());
  w.Key("kind"), w.String("cpu");
  w.EndObject();
  w.EndArray();
  w.Key("kv_codec"), w.String(ctx.info.kv_codec.c_str());
  w.Key("expert_store"), w.String(ctx.info.expert_store.c_str());
  w.Key("context_size"), w.Int(ctx.engine.context_size());
  w.Key("slots");
  w.StartObject();
  w.Key("parallel"), w.Int(ctx.options.parallel);
  w.Key("active"), w.Int(m.active_sequences);
  w.Key("free"), w.Int(std::max(0, ctx.options.parallel - m.active_sequences));
  w.Key("queued"), w.Int(m.queue_depth);
  w.EndObject();
  w.Key("memory");
  w.StartObject();
  w.Key("weights_bytes"), w.Uint64(m.weight_bytes);
  w.Key("kv_capacity_bytes"), w.Uint64(m.kv_bytes_capacity);
  w.Key("kv_used_bytes"), w.Uint64(m.kv_bytes_used);
  w.Key("kv_bytes_per_token"), w.Double(m.kv_bytes_per_token);
  w.Key("kv_window_bytes_per_sequence"), w.Uint64(m.kv_window_bytes_per_sequence);
  w.Key("kv_state_bytes_per_sequence"), w.Uint64(m.kv_state_bytes_per_sequence);
  w.Key("kv_recent_window"), w.Uint(m.kv_recent_window);
  w.Key("kv_recent_bytes"), w.Uint64(m.kv_recent_bytes);
  w.Key("resident_bytes"), w.Uint64(process_resident_bytes());
  // Use against --mem-limit: the process's resident memory now and at its peak, the plan's total
  // and its parts (engine/memory_budget.h), and the KV pages the running sequences claim.
  w.Key("peak_resident_bytes"), w.Uint64(resident_bytes_peak());
  if (m.memory.limit > 0) w.Key("limit_bytes"), w.Uint64(m.memory.limit);
  else w.Key("limit_bytes"), w.Null();
  w.Key("planned_bytes"), w.Uint64(m.memory.planned());
  w.Key("planned");
  w.StartObject();
  w.Key("process"), w.Uint64(m.memory.process);
  w.Key("weights"), w.Uint64(m.memory.weights);
  w.Key("expert_cache"), w.Uint64(m.memory.expert_cache);
  w.Key("draft"), w.Uint64(m.memory.draft);
  w.Key("activations"), w.Uint64(m.memory.activations);
  w.Key("kv_per_sequence"), w.Uint64(m.memory.kv_fixed);
  w.Key("headroom"), w.Uint64(m.memory.headroom);
  w.Key("kv_pages"), w.Uint64(m.memory.kv_pages);
  w.EndObject();
  w.Key("expert_cache_bytes"), w.Uint64(m.expert_cache_bytes);
  w.Key("kv_tokens"), w.Uint(m.kv_pages_total * m.kv_page_tokens);
  w.Key("kv_pages_total"), w.Uint(m.kv_pages_total);
  w.Key("kv_pages_in_use"), w.Uint(m.kv_pages_in_use);
  w.Key("kv_pages_claimed"), w.Uint(m.kv_pages_claimed);
  w.EndObject();
  w.EndObject();
  Reply reply = Reply::json(to_text(buffer));
  if (draining) reply.status = 503;
  return reply;
}

namespace {

// The one model object, as /v1/models lists it and /v1/models/{id} returns it.
void model_object(rapidjson::Writer<rapidjson::StringBuffer>& w, ServerContext& ctx) {
  const auto created = std::chrono::duration_cast<std::chrono::seconds>(
      std::chrono::system_clock::now().time_since_epoch()).count();
  w.StartObject();
  w.Key("id"), w.String(ctx.info.model.c_str());
  w.Key("object"), w.String("model");
  w.Key("created"), w.Int64(created);
  w.Key("owned_by"), w.String("sluice");
  w.Key("meta");
  w.StartObject();
  w.Key("n_ctx"), w.Int(ctx.engine.context_size());
  w.Key("backend"), w.String(ctx.info.backend.c_str());
  w.EndObject();
  w.EndObject();
}

}  // namespace

Reply handle_models(ServerContext& ctx) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("object"), w.String("list");
  w.Key("data");
  w.StartArray();
  model_object(w, ctx);
  w.EndArray();
  w.EndObject();
  return Reply::json(to_text(buffer));
}

Reply handle_model(ServerContext& ctx, const HttpRequest& req) {
  std::string_view path = target_path(req.target());
  std::string_view rest = path.substr(path.find("/models/") + std::string_view("/models/").size());
  // SDKs encode the id as one path segment ("%2F": Hugging Face ids hold a slash); a raw slash is taken as it is.
  const std::string id = percent_decoded(rest);
  if (id != ctx.info.model) {
    return Reply::error(ApiError{404, "The model '" + id + "' does not exist; this server serves '" + ctx.info.model + "'",
                                 "invalid_request_error", "model", "model_not_found"});
  }
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  model_object(w, ctx);
  return Reply::json(to_text(buffer));
}

Reply handle_metrics(ServerContext& ctx) {
  double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - ctx.started).count();
  return {200, render_metrics(ctx.engine.metrics(), ctx.counters, ctx.info, uptime),
          "text/plain; version=0.0.4; charset=utf-8"};
}

}  // namespace sluice::server
