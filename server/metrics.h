#pragma once
// GET /metrics: the engine's counters and the HTTP layer's, in Prometheus text format (0.0.4).
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "engine/engine.h"

namespace sluice::server {

struct ServerInfo {
  std::string model;
  std::string backend;
  std::string kv_codec;
  std::string expert_store;
  std::string version;
  std::string replica;  // X-Sluice-Replica on completion answers: --replica-name, else host name:port
};

// Counters the HTTP layer keeps. Thread-safe.
class ServerCounters {
 public:
  // `route` is a known route path or "other", so the label set stays small.
  void count_request(std::string_view route, int status);
  std::map<std::pair<std::string, int>, uint64_t> requests() const;

  std::atomic<int64_t> open_connections{0};
  std::atomic<int64_t> active_generations{0};
  std::atomic<int64_t> preparing_requests{0};   // waiting for or running on a work thread
  std::atomic<uint64_t> disconnect_cancels{0};  // generations cancelled because the client left
  std::atomic<uint64_t> slow_client_cancels{0}; // ... because the client did not read fast enough
  std::atomic<uint64_t> rejected_overloaded{0}; // 503s: the engine's queue or the work queue was full

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
};

uint64_t process_resident_bytes();

std::string render_metrics(const EngineMetrics& engine, const ServerCounters& counters, const ServerInfo& info,
                           double uptime_seconds);

}  // namespace sluice::server
