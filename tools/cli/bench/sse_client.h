#pragma once
// A blocking HTTP/1.1 client for one server (Boost.Beast over a keep-alive TCP connection) that
// POSTs JSON and hands each server-sent event's `data:` payload to a callback as it arrives. One per
// load-generator thread. A request past its deadline is ended by shutting the socket down from the
// watchdog (`expire`), the one call that may come from another thread.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "util/result.h"

namespace sluice::cli::bench {

struct HttpTarget {
  std::string host, port, base_path;  // base_path: "" or "/prefix"
  static Result<HttpTarget> parse(const std::string& url);  // http://host[:port][/prefix]
};

class SseClient {
 public:
  explicit SseClient(HttpTarget target);
  ~SseClient();
  SseClient(const SseClient&) = delete;
  SseClient& operator=(const SseClient&) = delete;

  // POSTs body to base_path + path. For a 200 answer, on_data gets every event's data (without
  // "data: "); any other status is an error carrying the status and the start of the body.
  // `headers`: more request headers; `replica`, when given, gets the answer's X-Sluice-Replica.
  Status post_stream(const std::string& path, const std::string& body, const std::string& api_key,
                     const std::function<void(const std::string&)>& on_data,
                     const std::vector<std::pair<std::string, std::string>>& headers = {}, std::string* replica = nullptr);
  // GET base_path + path; the body of a 200 answer.
  Result<std::string> get(const std::string& path);

  // The time by which the current request must end (watchdog side: expire() if past it).
  void set_deadline(std::chrono::steady_clock::time_point t) { deadline_ns_ = t.time_since_epoch().count(); }
  void clear_deadline() { deadline_ns_ = 0; }
  // Ends the current request if its deadline passed; safe from another thread.
  void expire_if_late(std::chrono::steady_clock::time_point now);

  struct Impl;  // the connection (Beast), defined in the .cpp

 private:
  std::unique_ptr<Impl> impl_;
  std::atomic<long long> deadline_ns_{0};
  std::atomic<int> fd_{-1};
  std::atomic<bool> expired_{false};
};

}  // namespace sluice::cli::bench
