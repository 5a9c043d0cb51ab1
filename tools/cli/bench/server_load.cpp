#include "server_load.h"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "bench_report.h"
#include "bench_stats.h"
#include "machine_info.h"
#include "server_prompts.h"
#include "sse_client.h"
#include "util/json.h"

namespace sluice::cli::bench {
namespace {

using Clock = std::chrono::steady_clock;
using Alloc = rapidjson::Document::AllocatorType;

struct Outcome {
  bool shared_prefix = false;
  int own_words = 0;
  int turn = 0;           // of its conversation (0: the first; always 0 with --turns 1)
  std::string replica;    // the answer's X-Sluice-Replica ("" when the server sent none)
  std::string answer;     // chat: the answer's text (the next turn's history)
  double ttft_ms = 0, total_ms = 0;
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  std::string error;  // "" = success
};

// A chat's history: (role, content) in order.
using History = std::vector<std::pair<std::string, std::string>>;

std::string request_body(const ServerLoadOptions& o, const History& history) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  if (o.api == "chat") {
    w.Key("messages");
    w.StartArray();
    for (const auto& [role, content] : history) {
      w.StartObject();
      w.Key("role"), w.String(role.c_str());
      w.Key("content"), w.String(content.c_str(), static_cast<rapidjson::SizeType>(content.size()));
      w.EndObject();
    }
    w.EndArray();
  } else {
    const std::string& prompt = history.front().second;
    w.Key("prompt"), w.String(prompt.c_str(), static_cast<rapidjson::SizeType>(prompt.size()));
  }
  w.Key("max_tokens"), w.Int(o.gen);
  // Every request generates exactly `gen` tokens, so tokens/s compares like with like.
  w.Key("ignore_eos"), w.Bool(true);
  w.Key("temperature"), w.Double(0.0);
  w.Key("stream"), w.Bool(true);
  w.Key("stream_options");
  w.StartObject();
  w.Key("include_usage"), w.Bool(true);
  w.EndObject();
  w.EndObject();
  return buf.GetString();
}

// Reads one event: the first chunk of a choice marks the first token (a server sends it with the first
// token even when that token has no text yet: a chat stream's role chunk, an empty text chunk; counting
// only text would time a model whose first tokens are bytes of a character, or have no text, to its
// first visible character); the usage chunk carries the counts.
void on_event(const std::string& data, Clock::time_point t0, Outcome& out, bool& done) {
  if (data == "[DONE]") {
    done = true;
    return;
  }
  auto doc = json::parse(data, "an event");
  if (!doc || !doc->IsObject()) {
    if (out.error.empty()) out.error = "an event is not JSON: " + data.substr(0, 120);
    return;
  }
  if (const auto* e = json::member(*doc, "error"); e && e->IsObject()) {
    out.error = json::string(*e, "message").value_or("error event");
    return;
  }
  if (const auto* choices = json::member(*doc, "choices"); choices && choices->IsArray() && !choices->Empty()) {
    const auto& c = (*choices)[0];
    std::string piece = json::string(c, "text").value_or("");
    if (const auto* delta = json::member(c, "delta"); delta && delta->IsObject()) {
      piece = json::string(*delta, "content").value_or("");
      out.answer += piece;
    }
    if (out.ttft_ms == 0) out.ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  }
  if (const auto* u = json::member(*doc, "usage"); u && u->IsObject()) {
    out.prompt_tokens = static_cast<int>(json::integer(*u, "prompt_tokens").value_or(0));
    out.completion_tokens = static_cast<int>(json::integer(*u, "completion_tokens").value_or(0));
    if (const auto* d = json::member(*u, "prompt_tokens_details"); d && d->IsObject())
      out.cached_tokens = static_cast<int>(json::integer(*d, "cached_tokens").value_or(0));
  }
}

rapidjson::Value summary_row(const char* name, const std::vector<Outcome>& all, bool (*keep)(const Outcome&), double wall_s, Alloc& a) {
  std::vector<double> ttft, per_request_tps;
  int n = 0, errors = 0;
  double prompt = 0, cached = 0, tokens = 0;
  for (const auto& o : all) {
    if (!keep(o)) continue;
    ++n;
    if (!o.error.empty()) {
      ++errors;
      continue;
    }
    ttft.push_back(o.ttft_ms);
    prompt += o.prompt_tokens;
    cached += o.cached_tokens;
    tokens += o.completion_tokens;
    if (o.total_ms > o.ttft_ms && o.completion_tokens > 1) per_request_tps.push_back((o.completion_tokens - 1) * 1000.0 / (o.total_ms - o.ttft_ms));
  }
  const int ok = n - errors;
  rapidjson::Value r(rapidjson::kObjectType);
  r.AddMember("class", rapidjson::StringRef(name), a);
  r.AddMember("requests", n, a);
  r.AddMember("errors", errors, a);
  r.AddMember("completion_tokens", tokens, a);
  r.AddMember("aggregate_tps", wall_s > 0 ? tokens / wall_s : 0.0, a);
  r.AddMember("ttft_p50_ms", percentile(ttft, 50), a);
  r.AddMember("ttft_p99_ms", percentile(ttft, 99), a);
  r.AddMember("decode_tps_per_request_p50", percentile(per_request_tps, 50), a);
  r.AddMember("prompt_tokens_mean", ok > 0 ? prompt / ok : 0.0, a);
  r.AddMember("cached_tokens_mean", ok > 0 ? cached / ok : 0.0, a);
  r.AddMember("cache_hit_rate", prompt > 0 ? cached / prompt : 0.0, a);  // of the prompt tokens, found in the cache
  return r;
}

// Requests, prompt tokens and cached tokens by the replica that answered (X-Sluice-Replica).
rapidjson::Value replica_rows(const std::vector<Outcome>& all, Alloc& a) {
  std::map<std::string, std::array<double, 3>> by;  // requests, prompt, cached
  for (const auto& o : all) {
    if (!o.error.empty()) continue;
    auto& v = by[o.replica.empty() ? "(unnamed)" : o.replica];
    v[0] += 1, v[1] += o.prompt_tokens, v[2] += o.cached_tokens;
  }
  rapidjson::Value rows(rapidjson::kArrayType);
  for (const auto& [name, v] : by) {
    rapidjson::Value r(rapidjson::kObjectType);
    r.AddMember("replica", rapidjson::Value(name.c_str(), static_cast<rapidjson::SizeType>(name.size()), a), a);
    r.AddMember("requests", static_cast<int>(v[0]), a);
    r.AddMember("prompt_tokens", v[1], a);
    r.AddMember("cached_tokens", v[2], a);
    r.AddMember("cache_hit_rate", v[1] > 0 ? v[2] / v[1] : 0.0, a);
    rows.PushBack(r, a);
  }
  return rows;
}

}  // namespace

int run_server_load(const BenchOptions& options) {
  const ServerLoadOptions& o = options.server;
  auto target = HttpTarget::parse(o.url);
  if (!target) {
    std::cerr << "sluice bench --server: " << target.message() << "\n";
    return 2;
  }
  std::string model = "unknown";
  {
    SseClient probe(*target);
    auto models = probe.get("/v1/models");
    if (!models) {
      std::cerr << "sluice bench --server: " << o.url << " does not answer: " << models.message() << "\n";
      return 1;
    }
    if (auto doc = json::parse(*models, "/v1/models"); doc && doc->IsObject())
      if (const auto* data = json::member(*doc, "data"); data && data->IsArray() && !data->Empty())
        model = json::string((*data)[0], "id").value_or(model);
  }
  const uint32_t run = std::random_device{}();
  const auto requests = make_load_requests(o.requests, o.shared_prefix_words, o.prompt_words, run);
  const int turns = o.turns;
  std::vector<Outcome> outcomes(requests.size() * static_cast<std::size_t>(turns));
  const std::string path = o.api == "chat" ? "/v1/chat/completions" : "/v1/completions";
  std::fprintf(stderr, "sluice bench --server %s: model %s, %d clients, %d requests, gen %d, shared prefix %d words\n", o.url.c_str(),
               model.c_str(), o.clients, o.requests, o.gen, o.shared_prefix_words);

  // The machine (and its load) before the run; the load after it is added at the end.
  rapidjson::Document machine_doc;
  rapidjson::Value machine = machine_record(options.plugin_dir, machine_doc.GetAllocator());
  std::atomic<int> next{0}, finished{0};
  std::atomic<bool> stop_watchdog{false};
  std::mutex progress_mutex;
  const int n_clients = std::min(o.clients, o.requests);
  std::vector<std::unique_ptr<SseClient>> clients;
  for (int c = 0; c < n_clients; ++c) clients.push_back(std::make_unique<SseClient>(*target));
  std::thread watchdog([&] {
    while (!stop_watchdog) {
      const auto now = Clock::now();
      for (auto& c : clients) c->expire_if_late(now);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < n_clients; ++c) {
    threads.emplace_back([&, c] {
      SseClient& client = *clients[static_cast<std::size_t>(c)];
      for (int i; (i = next.fetch_add(1)) < static_cast<int>(requests.size());) {
        const auto& req = requests[static_cast<std::size_t>(i)];
        // A conversation: its turns one after another on this client, each adding the answer and a
        // new message to the history; its id keeps it on one replica behind a balancer.
        History history = {{"user", req.prompt}};
        std::vector<std::pair<std::string, std::string>> headers;
        if (turns > 1 && o.session_ids) headers.emplace_back("X-Session-Id", "bench-" + std::to_string(run) + "-" + std::to_string(i));
        for (int turn = 0; turn < turns; ++turn) {
          Outcome& out = outcomes[static_cast<std::size_t>(i) * static_cast<std::size_t>(turns) + static_cast<std::size_t>(turn)];
          out.shared_prefix = req.shared_prefix;
          out.own_words = req.own_words;
          out.turn = turn;
          bool done = false;
          const auto t0 = Clock::now();
          client.set_deadline(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s)));
          Status s = client.post_stream(path, request_body(o, history), o.api_key,
                                        [&](const std::string& data) { on_event(data, t0, out, done); }, headers, &out.replica);
          client.clear_deadline();
          out.total_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
          if (!s) out.error = s.message();
          else if (out.error.empty() && !done) out.error = "the stream ended without data: [DONE]";
          else if (out.error.empty() && out.completion_tokens == 0) out.error = "no usage chunk (completion_tokens 0)";
          if (out.error.empty() && out.ttft_ms == 0) out.ttft_ms = out.total_ms;  // no chunk of a choice before the end
          {
            std::lock_guard lock(progress_mutex);
            const int k = ++finished;
            const std::size_t total = outcomes.size();
            if (out.error.empty())
              std::fprintf(stderr, "[%d/%zu] request %d%s (%s, %d words)%s%s: ttft %.0f ms, %d tokens in %.0f ms, %d prompt tokens (%d cached)\n", k,
                           total, i + 1, turns > 1 ? (" turn " + std::to_string(turn + 1)).c_str() : "", req.shared_prefix ? "shared prefix" : "unique",
                           req.own_words, out.replica.empty() ? "" : " on ", out.replica.c_str(), out.ttft_ms, out.completion_tokens, out.total_ms,
                           out.prompt_tokens, out.cached_tokens);
            else
              std::fprintf(stderr, "[%d/%zu] request %d failed: %s\n", k, total, i + 1, out.error.c_str());
          }
          if (!out.error.empty()) break;  // the conversation cannot go on without its answer
          history.emplace_back("assistant", out.answer);
          history.emplace_back("user", "Go on: turn " + std::to_string(turn + 2) + " of request " + std::to_string(i + 1) + ".");
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const double wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  stop_watchdog = true;
  watchdog.join();

  rapidjson::Document doc(rapidjson::kObjectType);
  auto& a = doc.GetAllocator();
  auto s = [&](const std::string& v) { return rapidjson::Value(v.c_str(), static_cast<rapidjson::SizeType>(v.size()), a); };
  doc.AddMember("machine", rapidjson::Value(machine, a), a);
  doc["machine"].AddMember("loadavg_end", s(loadavg()), a);
  rapidjson::Value server(rapidjson::kObjectType);
  server.AddMember("url", s(o.url), a);
  server.AddMember("model", s(model), a);
  server.AddMember("api", s(o.api), a);
  server.AddMember("clients", o.clients, a);
  server.AddMember("requests", o.requests, a);
  server.AddMember("gen", o.gen, a);
  server.AddMember("shared_prefix_words", o.shared_prefix_words, a);
  server.AddMember("turns", turns, a);
  server.AddMember("session_ids", o.session_ids, a);
  server.AddMember("run_tag", run, a);
  rapidjson::Value words(rapidjson::kArrayType);
  for (int w : o.prompt_words) words.PushBack(w, a);
  server.AddMember("prompt_words", words, a);
  doc.AddMember("server", server, a);
  doc.AddMember("wall_s", wall_s, a);
  rapidjson::Value rows(rapidjson::kArrayType);
  rows.PushBack(summary_row("all", outcomes, [](const Outcome&) { return true; }, wall_s, a), a);
  rows.PushBack(summary_row("shared_prefix", outcomes, [](const Outcome& x) { return x.shared_prefix; }, wall_s, a), a);
  rows.PushBack(summary_row("unique", outcomes, [](const Outcome& x) { return !x.shared_prefix; }, wall_s, a), a);
  if (turns > 1) {
    rows.PushBack(summary_row("first_turn", outcomes, [](const Outcome& x) { return x.turn == 0; }, wall_s, a), a);
    rows.PushBack(summary_row("later_turns", outcomes, [](const Outcome& x) { return x.turn > 0; }, wall_s, a), a);
  }
  doc.AddMember("rows", rows, a);
  doc.AddMember("replicas", replica_rows(outcomes, a), a);
  rapidjson::Value list(rapidjson::kArrayType);
  int errors = 0;
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    const auto& x = outcomes[i];
    rapidjson::Value r(rapidjson::kObjectType);
    r.AddMember("index", static_cast<int>(i), a);
    r.AddMember("shared_prefix", x.shared_prefix, a);
    r.AddMember("own_words", x.own_words, a);
    r.AddMember("turn", x.turn, a);
    if (!x.replica.empty()) r.AddMember("replica", s(x.replica), a);
    r.AddMember("prompt_tokens", x.prompt_tokens, a);
    r.AddMember("cached_tokens", x.cached_tokens, a);
    r.AddMember("completion_tokens", x.completion_tokens, a);
    r.AddMember("ttft_ms", x.ttft_ms, a);
    r.AddMember("total_ms", x.total_ms, a);
    if (!x.error.empty()) {
      ++errors;
      r.AddMember("error", s(x.error), a);
    }
    list.PushBack(r, a);
  }
  doc.AddMember("requests", list, a);

  std::printf("| requests | clients | errors | tokens/s (aggregate) | TTFT p50 ms | TTFT p99 ms | per-request decode tok/s p50 | prompt tokens | cached | cache hit |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  for (const auto& r : doc["rows"].GetArray()) {
    std::printf("| %s: %d | %d | %d | %s | %s | %s | %s | %s | %s | %.0f %% |\n", r["class"].GetString(), r["requests"].GetInt(), n_clients,
                r["errors"].GetInt(), cell(r, "aggregate_tps", 1).c_str(), cell(r, "ttft_p50_ms", 1).c_str(), cell(r, "ttft_p99_ms", 1).c_str(),
                cell(r, "decode_tps_per_request_p50", 1).c_str(), cell(r, "prompt_tokens_mean", 0).c_str(), cell(r, "cached_tokens_mean", 0).c_str(),
                100.0 * r["cache_hit_rate"].GetDouble());
  }
  // Behind a balancer: who answered, and what each found in its own cache.
  if (doc["replicas"].Size() > 1 || (doc["replicas"].Size() == 1 && std::string(doc["replicas"][0]["replica"].GetString()) != "(unnamed)")) {
    std::printf("\n| replica | requests | prompt tokens | cached tokens | cache hit |\n| --- | --- | --- | --- | --- |\n");
    for (const auto& r : doc["replicas"].GetArray())
      std::printf("| %s | %d | %.0f | %.0f | %.0f %% |\n", r["replica"].GetString(), r["requests"].GetInt(), r["prompt_tokens"].GetDouble(),
                  r["cached_tokens"].GetDouble(), 100.0 * r["cache_hit_rate"].GetDouble());
  }
  std::fflush(stdout);
  if (!options.json_out.empty()) {
    if (auto w = write_json_file(options.json_out, doc); !w) {
      std::cerr << "sluice bench: " << w.message() << "\n";
      return 1;
    }
    std::fprintf(stderr, "wrote %s\n", options.json_out.c_str());
  }
  if (errors > 0) std::fprintf(stderr, "sluice bench --server: %d of %zu requests failed\n", errors, outcomes.size());
  return errors > 0 ? 1 : 0;
}

}  // namespace sluice::cli::bench
