#include "server/response_store.h"

namespace sluice::server {

void ResponseStore::put(const std::string& id, StoredResponse entry) {
  std::lock_guard lock(mutex_);
  if (bytes_of(entry) > max_bytes_) return;  // larger than the whole store: not kept
  if (auto it = slots_.find(id); it != slots_.end()) {
    bytes_ -= bytes_of(it->second.entry);
    order_.erase(it->second.position);
    slots_.erase(it);
  }
  bytes_ += bytes_of(entry);
  order_.push_front(id);
  slots_.emplace(id, Slot{std::move(entry), order_.begin()});
  while (slots_.size() > max_entries_ || bytes_ > max_bytes_) drop_oldest();
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = slots_.find(id);
  if (it == slots_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second.position);
  return it->second.entry;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = slots_.find(id);
  if (it == slots_.end()) return false;
  bytes_ -= bytes_of(it->second.entry);
  order_.erase(it->second.position);
  slots_.erase(it);
  return true;
}

std::size_t ResponseStore::size() const {
  std::lock_guard lock(mutex_);
  return slots_.size();
}

void ResponseStore::drop_oldest() {
  auto it = slots_.find(order_.back());
  bytes_ -= bytes_of(it->second.entry);
  slots_.erase(it);
  order_.pop_back();
}

}  // namespace sluice::server
