// `sluice serve` (and plain `sluice --model ...`): the OpenAI-compatible HTTP server.
#include <cstdio>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "engine/engine.h"
#include "server/chat_prompt.h"
#include "server/memory_plan.h"
#include "server/options.h"
#include "server/server.h"

namespace sluice::cli {

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
  const server::ServerOptions& options = parsed->options;

  // stdout carries the one "ready" line (and --info's plan); logs go to stderr.
  auto logger = spdlog::stderr_color_mt("sluice-serve");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(options.log_level));
  for (const auto& warning : parsed->warnings) spdlog::warn("{}", warning);
  if (auto available = server::check_available(options); !available) {
    std::fprintf(stderr, "sluice serve: %s\n", available.message().c_str());
    return 2;
  }

  auto engine = Engine::create(server::to_engine_options(options));
  if (!engine) {
    std::fprintf(stderr, "sluice serve: %s\n", engine.message().c_str());
    return 1;
  }
  if (options.info) {
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
    if (auto listening = http_server.listen(); !listening) {
      std::fprintf(stderr, "sluice serve: %s\n", listening.message().c_str());
      status = 1;
    } else {
      const auto endpoint = http_server.local_endpoint();
      std::printf("sluice ready: http://%s:%u model=%s backend=%s\n", endpoint.address().to_string().c_str(),
                  endpoint.port(), (*engine)->model_name().c_str(), (*engine)->backend_name().c_str());
      std::fflush(stdout);
      http_server.run();
      spdlog::info("stopped");
    }
  }
  (*engine)->shutdown();
  return status;
}

}  // namespace sluice::cli
