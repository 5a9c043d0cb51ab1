#pragma once
// Finished Responses API answers kept in memory, for `previous_response_id` (the conversation so far,
// as chat messages, to continue from) and GET /v1/responses/{id} (the response object). Bounded by
// count and bytes: the least recently used go first, so a long-running server keeps the recent
// conversations and nothing grows without limit. Nothing survives a restart.
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace sluice::server {

struct StoredResponse {
  std::string conversation;  // JSON array of chat messages: the inputs and this answer's assistant turn
  std::string response;      // the response object's JSON
};

class ResponseStore {
 public:
  ResponseStore(std::size_t max_entries = 1024, std::size_t max_bytes = std::size_t{64} << 20)
      : max_entries_(max_entries), max_bytes_(max_bytes) {}

  void put(const std::string& id, StoredResponse entry);
  std::optional<StoredResponse> get(const std::string& id);  // and marks it recently used
  bool erase(const std::string& id);
  std::size_t size() const;

 private:
  using Order = std::list<std::string>;  // most recently used first
  struct Slot {
    StoredResponse entry;
    Order::iterator position;
  };
  static std::size_t bytes_of(const StoredResponse& e) { return e.conversation.size() + e.response.size(); }
  void drop_oldest();

  mutable std::mutex mutex_;
  std::size_t max_entries_;
  std::size_t max_bytes_;
  std::size_t bytes_ = 0;
  Order order_;
  std::unordered_map<std::string, Slot> slots_;
};

}  // namespace sluice::server
