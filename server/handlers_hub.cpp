// The web app's endpoints beyond the OpenAI API: what the server runs (/v1/server), the local
// Hugging Face cache (/v1/hub/models), hub search (/v1/hub/search, proxied to $HF_ENDPOINT) and
// downloads into the cache (/v1/hub/downloads). Under /v1, so --api-key guards them.
#include <cmath>
#include <cstdlib>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "hub/hub_api.h"
#include "hub/hub_cache.h"
#include "server/cached_models.h"
#include "server/handlers.h"
#include "server/memory_plan.h"
#include "util/json.h"

namespace sluice::server {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

std::string to_text(const rapidjson::StringBuffer& b) { return {b.GetString(), b.GetSize()}; }
void str(Writer& w, const std::string& s) { w.String(s.data(), static_cast<rapidjson::SizeType>(s.size())); }

constexpr std::size_t kMaxQueryBytes = 200;
constexpr int kDefaultSearchLimit = 20;
constexpr int kMaxSearchLimit = 50;

// Options are floats: 0.6f printed as a double would read 0.6000000238418579.
double tidy(float value) { return std::round(static_cast<double>(value) * 1e6) / 1e6; }

void write_job(Writer& w, const DownloadJobs::Snapshot& job) {
  const auto& v = job.progress;
  w.StartObject();
  w.Key("id"), str(w, job.id);
  w.Key("object"), w.String("hub.download");
  w.Key("model"), str(w, job.model);
  // "done" or "failed" once the job is over; while it runs, the step it is at (resolving, downloading, ...).
  w.Key("phase"), str(w, job.finished || (v.phase != "done" && v.phase != "failed") ? v.phase : std::string("finishing"));
  w.Key("files_done"), w.Int(v.files_done);
  w.Key("files_total"), w.Int(v.files_total);
  w.Key("bytes_done"), w.Uint64(v.done_bytes);
  w.Key("bytes_total"), w.Uint64(v.total_bytes);
  w.Key("percent"), w.Double(v.total_bytes ? 100.0 * static_cast<double>(v.done_bytes) / static_cast<double>(v.total_bytes)
                                           : (v.phase == "done" ? 100.0 : 0.0));
  w.Key("seconds"), w.Double(v.seconds);
  if (!v.error.empty()) w.Key("error"), str(w, v.error);
  if (!job.snapshot_dir.empty()) w.Key("snapshot_dir"), str(w, job.snapshot_dir);
  w.EndObject();
}

Reply job_reply(int status, const DownloadJobs::Snapshot& job) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  write_job(w, job);
  return {status, to_text(buffer)};
}

}  // namespace

Reply handle_server_info(ServerContext& ctx) {
  const MemoryPlan plan = plan_memory(ctx.engine, ctx.info.kv_codec, ctx.options.mem_limit);
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("object"), w.String("sluice.server");
  w.Key("version"), str(w, ctx.info.version);
  w.Key("model"), str(w, ctx.info.model);
  w.Key("backend"), str(w, ctx.info.backend);
  w.Key("kv_codec"), str(w, ctx.info.kv_codec);
  w.Key("expert_store"), str(w, ctx.info.expert_store);
  w.Key("context_size"), w.Int(ctx.engine.context_size());
  w.Key("parallel"), w.Int(ctx.options.parallel);
  w.Key("thinking"), str(w, ctx.options.thinking);
  w.Key("api_key_required"), w.Bool(!ctx.options.api_key.empty());
  w.Key("defaults");
  w.StartObject();
  w.Key("temperature"), w.Double(tidy(ctx.options.temp));
  w.Key("top_p"), w.Double(tidy(ctx.options.top_p));
  w.Key("top_k"), w.Int(ctx.options.top_k);
  w.Key("min_p"), w.Double(tidy(ctx.options.min_p));
  w.Key("repeat_penalty"), w.Double(tidy(ctx.options.repeat_penalty));
  w.Key("max_tokens"), w.Int(ctx.options.max_tokens);
  w.EndObject();
  w.Key("memory_plan");
  w.StartObject();
  w.Key("weights_bytes"), w.Double(plan.weights_bytes);
  w.Key("kv");
  w.StartArray();
  for (const auto& r : plan.kv) {
    w.StartObject();
    w.Key("codec"), str(w, r.codec);
    w.Key("bytes_per_token"), w.Double(r.bytes_per_token);
    w.Key("bytes_at_context"), w.Double(r.bytes_at_context);
    w.Key("configured"), w.Bool(r.configured);
    w.EndObject();
  }
  w.EndArray();
  w.Key("per_sequence_bytes"), w.Double(plan.per_sequence_bytes);
  w.Key("total_bytes"), w.Double(plan.total_bytes);
  if (plan.budget) {
    w.Key("budget_bytes"), w.Uint64(*plan.budget);
    w.Key("budget_source"), str(w, plan.budget_name);
    w.Key("fits"), w.Bool(plan.fits());
  }
  w.EndObject();
  w.Key("machine");
  w.StartObject();
  if (auto total = total_memory_bytes()) w.Key("memory_total_bytes"), w.Uint64(*total);
  if (auto available = available_memory_bytes()) w.Key("memory_available_bytes"), w.Uint64(*available);
  w.EndObject();
  w.EndObject();
  return Reply::json(to_text(buffer));
}

Reply handle_cached_models(ServerContext& ctx) {
  const auto root = hub::hub_cache_root();
  const auto models = list_cached_models(root);
  const auto available = available_memory_bytes();
  std::optional<uint64_t> budget = available;
  if (auto limit = parse_mem_limit(ctx.options.mem_limit); !ctx.options.mem_limit.empty() && limit) budget = *limit;
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("object"), w.String("list");
  w.Key("cache_dir"), str(w, root.string());
  if (available) w.Key("memory_available_bytes"), w.Uint64(*available);
  if (budget) w.Key("memory_budget_bytes"), w.Uint64(*budget);
  w.Key("estimate_context"), w.Int(kEstimateContext);
  w.Key("data");
  w.StartArray();
  for (const auto& m : models) {
    w.StartObject();
    w.Key("id"), str(w, m.id);
    w.Key("object"), w.String("hub.cached_model");
    w.Key("commit"), str(w, m.commit);
    w.Key("snapshot_dir"), str(w, m.snapshot_dir);
    w.Key("complete"), w.Bool(m.complete);
    if (!m.complete) w.Key("missing"), str(w, m.missing);
    w.Key("disk_bytes"), w.Uint64(m.disk_bytes);
    if (m.needed_bytes) {
      w.Key("weights_bytes"), w.Uint64(m.weights_bytes);
      w.Key("needed_bytes"), w.Uint64(m.needed_bytes);
      if (budget) w.Key("fits"), w.Bool(m.needed_bytes <= *budget);
    }
    w.Key("served"), w.Bool(m.id == ctx.info.model);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Reply::json(to_text(buffer));
}

Reply handle_hub_search(ServerContext&, const HttpRequest& req) {
  const std::string_view target(req.target().data(), req.target().size());
  const auto query = query_param(target, "q");
  if (!query || query->empty()) return Reply::error(ApiError::bad_request("q (the search text) is required", "q"));
  if (query->size() > kMaxQueryBytes)
    return Reply::error(ApiError::bad_request("q is longer than " + std::to_string(kMaxQueryBytes) + " bytes", "q"));
  int limit = kDefaultSearchLimit;
  if (const auto text = query_param(target, "limit")) {
    char* end = nullptr;
    const long n = std::strtol(text->c_str(), &end, 10);
    if (text->empty() || *end != '\0' || n < 1 || n > kMaxSearchLimit)
      return Reply::error(ApiError::bad_request("limit must be an integer from 1 to " + std::to_string(kMaxSearchLimit), "limit"));
    limit = static_cast<int>(n);
  }
  const hub::HubSettings settings = hub::HubSettings::from_environment();
  if (settings.offline)
    return Reply::error(ApiError{503, "HF_HUB_OFFLINE is set: this server does not contact the hub", "unavailable_error", "",
                                 "hub_offline"});
  const hub::HubApi api(settings, std::chrono::seconds(15));
  auto found = api.search_models(*query, limit);
  if (!found) return Reply::error(ApiError{502, "hub search failed: " + found.message(), "upstream_error", "", "hub_error"});
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("object"), w.String("list");
  w.Key("endpoint"), str(w, settings.endpoint);
  w.Key("data");
  w.StartArray();
  for (const auto& m : *found) {
    w.StartObject();
    w.Key("id"), str(w, m.id);
    if (m.downloads >= 0) w.Key("downloads"), w.Int64(m.downloads);
    if (m.likes >= 0) w.Key("likes"), w.Int64(m.likes);
    if (!m.pipeline_tag.empty()) w.Key("pipeline_tag"), str(w, m.pipeline_tag);
    if (!m.library_name.empty()) w.Key("library_name"), str(w, m.library_name);
    w.Key("gated"), w.Bool(m.gated);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return Reply::json(to_text(buffer));
}

Reply handle_start_download(ServerContext& ctx, const HttpRequest& req) {
  auto body = parse_body_object(req.body());
  if (!body) return Reply::error(body.error());
  const auto model = json::string(*body, "model");
  if (!model) return Reply::error(ApiError::bad_request("model must be a hub id, org/name[@revision]", "model"));
  auto id = hub::parse_hub_id(*model);
  if (!id) return Reply::error(ApiError::bad_request("model: " + id.message(), "model"));
  auto started = ctx.downloads.start(*id);
  if (!started)
    return Reply::error(ApiError{429, started.message(), "rate_limit_error", "", "too_many_downloads"});
  return job_reply(started->created ? 202 : 200, started->job);
}

Reply handle_list_downloads(ServerContext& ctx) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("object"), w.String("list");
  w.Key("data");
  w.StartArray();
  for (const auto& job : ctx.downloads.list()) write_job(w, job);
  w.EndArray();
  w.EndObject();
  return Reply::json(to_text(buffer));
}

Reply handle_download(ServerContext& ctx, const HttpRequest& req) {
  const std::string_view path = target_path(std::string_view(req.target().data(), req.target().size()));
  const std::string id = percent_decoded(path.substr(std::string_view("/v1/hub/downloads/").size()));
  const auto job = ctx.downloads.find(id);
  if (!job)
    return Reply::error(ApiError{404, "no download with id '" + id + "'", "invalid_request_error", "id", "download_not_found"});
  return job_reply(200, *job);
}

}  // namespace sluice::server
