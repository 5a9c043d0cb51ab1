// `sluice serve` (and plain `sluice --model ...`): the OpenAI-compatible HTTP server.
#include <cstdio>
#include <filesystem>
#include <optional>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "hub/hub_id.h"
#include "model_source.h"
#include "engine/engine.h"
#include "server/calibrate.h"
#include "server/calibrated_plan.h"
#include "server/chat_prompt.h"
#include "server/memory_plan.h"
#include "server/options.h"
#include "server/loading_server.h"
#include "server/server.h"

namespace sluice::cli {
namespace {

// The origin a person types: a wildcard bind (0.0.0.0, ::) is reached through the loopback address,
// an IPv6 address goes in brackets.
std::string browser_origin(const boost::asio::ip::address& address, unsigned short port) {
  std::string host = address.to_string();
  if (address.is_unspecified()) host = address.is_v6() ? "[::1]" : "127.0.0.1";
  else if (address.is_v6()) host = "[" + host + "]";
  return "http://" + host + ":" + std::to_string(port);
}

}  // namespace

int run_serve(const Args& args) {
  auto parsed = server::parse_server_options(args);
  if (!parsed) {
    std::fprintf(stderr, "sluice serve: %s\n(`sluice serve --help` lists the options)\n", parsed.message().c_str());
    return 2;
  }
  if (parsed->help) {
    std::fputs(parsed->help_text.c_str(), stdout);
    return 0;
  }
  server::ServerOptions& options = parsed->options;

  // stdout carries the "ready" lines (and --info's plan); logs go to stderr.
  auto logger = spdlog::stderr_color_mt("sluice-serve");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(options.log_level));
  for (const auto& warning : parsed->warnings) spdlog::warn("{}", warning);
  if (auto available = server::check_available(options); !available) {
    std::fprintf(stderr, "sluice serve: %s\n", available.message().c_str());
    return 2;
  }

  // A hub model may take minutes to download: meanwhile the port answers 503 and /health shows the
  // progress (a folder loads in seconds and keeps the plain startup).
  hub::DownloadProgress progress;
  std::optional<server::LoadingServer> loading;
  if (hub::names_hub_model(options.model) && !options.info) {
    const std::string requested = options.model;
    loading.emplace([&progress, requested] { return hub::loading_health_json(progress.view(), requested); });
    if (auto listening = loading->listen(options.host, options.port); !listening) {
      std::fprintf(stderr, "sluice serve: %s\n", listening.message().c_str());
      return 1;
    }
    options.port = loading->port();  // port 0: the real server takes the port chosen here
    std::printf("sluice loading: http://%s:%u model=%s (/health reports the progress)\n", options.host.c_str(), loading->port(),
                requested.c_str());
    std::fflush(stdout);
  }
  auto model = resolve_model_arg("serve", options.model, &progress);
  if (!model) return 1;
  options.model = model->dir;
  if (options.alias.empty()) options.alias = model->name;
  if (!options.draft_model.empty()) {
    auto draft = resolve_model_arg("serve", options.draft_model, &progress);
    if (!draft) return 1;
    options.draft_model = draft->dir;
  }
  progress.set_phase("loading");

  if (options.calibrate) {
    std::printf("calibrating %s on %s\n", options.model.c_str(), server::machine_description().c_str());
    auto plan = server::calibrate(options, [](const std::string& line) {
      std::printf("  %s\n", line.c_str());
      std::fflush(stdout);
    });
    if (!plan) {
      std::fprintf(stderr, "sluice serve --calibrate: %s\n", plan.message().c_str());
      return 1;
    }
    const auto path = server::plan_path(options.model, options);
    if (auto written = server::write_plan(*plan, path); !written) {
      std::fprintf(stderr, "sluice serve --calibrate: %s\n", written.message().c_str());
      return 1;
    }
    std::string chosen = "--parallel " + std::to_string(plan->parallel) + " --prefill-size " + std::to_string(plan->prefill_size);
    if (plan->expert_cache_mb) chosen += " --expert-cache-mb " + std::to_string(plan->expert_cache_mb);
    if (plan->gpu_layers >= 0) chosen += " --gpu-layers " + std::to_string(plan->gpu_layers) + " (for --gpu-layers auto)";
    std::printf("chosen: %s\nplan written: %s\n", chosen.c_str(), path.c_str());
    return 0;
  }
  // A plan --calibrate wrote for this model and machine chooses what the user did not.
  std::string calibrated;
  {
    std::vector<std::string> plan_warnings;
    std::filesystem::path plan_file;
    if (auto plan = server::find_plan(options.model, options, plan_warnings, &plan_file)) {
      calibrated = "calibrated plan " + plan_file.string() + ": " + server::apply_plan(*plan, parsed->given, options);
      spdlog::info("{}", calibrated);
    }
    for (const auto& warning : plan_warnings) spdlog::warn("{}", warning);
  }

  auto engine = Engine::create(server::to_engine_options(options));
  if (!engine) {
    std::fprintf(stderr, "sluice serve: %s\n", engine.message().c_str());
    return 1;
  }
  if (const std::string drafter = (*engine)->metrics().drafter; !drafter.empty())
    spdlog::info("speculative decoding: {} (up to {} guesses a pass, while at most {} sequences decode)", drafter,
                 options.num_draft_tokens, options.spec_max_batch);
  if (options.info) {
    if (!calibrated.empty()) std::printf("%s\n", calibrated.c_str());
    std::fputs(server::memory_plan_text(**engine, server::to_engine_options(options).kv_codec, options.mem_limit).c_str(), stdout);
    (*engine)->shutdown();
    return 0;
  }

  auto chat = server::ChatPrompt::load(options.model, server::default_thinking(options));
  if (!chat) {
    std::fprintf(stderr, "sluice serve: %s\n", chat.message().c_str());
    return 1;
  }
  if (!chat->available()) spdlog::warn("{}", chat->unavailable_reason());

  int status = 0;
  {
    server::Server http_server(**engine, options, std::move(*chat));
    // A hub model: the listening socket passes from the loading answers to the server, backlog and all.
    const int handed = loading ? loading->hand_over() : -1;
    auto listening = handed >= 0 ? http_server.listen_on(handed) : http_server.listen();
    loading.reset();  // answers the loading server had in flight finish
    if (!listening) {
      std::fprintf(stderr, "sluice serve: %s\n", listening.message().c_str());
      status = 1;
    } else {
      const auto endpoint = http_server.local_endpoint();
      std::printf("sluice ready: http://%s:%u model=%s backend=%s\n", endpoint.address().to_string().c_str(),
                  endpoint.port(), options.alias.c_str(), (*engine)->backend_name().c_str());
      const std::string base = browser_origin(endpoint.address(), endpoint.port());
      std::printf("  chat in a browser:   %s/\n  OpenAI API base URL: %s/v1\n", base.c_str(), base.c_str());
      std::fflush(stdout);
      http_server.run();
      spdlog::info("stopped");
    }
  }
  (*engine)->shutdown();
  return status;
}

}  // namespace sluice::cli
