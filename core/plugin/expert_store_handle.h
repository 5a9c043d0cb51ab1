#pragma once
// C++ side of the expert-store boundary: an opened store (RAII over sl_expertstore).
#include <memory>
#include <string>
#include <vector>

#include "sluice/expertstore.h"
#include "util/result.h"

namespace sluice {

class ExpertStoreHandle {
 public:
  static Result<std::unique_ptr<ExpertStoreHandle>> open(const sl_expertstore_api* api, const std::string& name,
                                                         const sl_expertstore_config& config);
  ~ExpertStoreHandle();
  ExpertStoreHandle(const ExpertStoreHandle&) = delete;
  ExpertStoreHandle& operator=(const ExpertStoreHandle&) = delete;

  const std::string& name() const { return name_; }
  // Whether the parts' host pointers stay valid and unchanged for the store's lifetime (the built-in
  // `resident` store lends the mapped files themselves): a device may then keep its own copy of an
  // expert instead of receiving it every pass.
  bool lends_stable_memory() const { return stable_; }
  // parts_out: n * n_parts host pointers, valid until release.
  Status acquire(uint32_t layer, const std::vector<uint32_t>& experts, std::vector<const void*>& parts_out);
  void release(uint32_t layer, const std::vector<uint32_t>& experts);
  void prefetch(uint32_t layer, const std::vector<uint32_t>& experts);
  sl_expertstore_stats stats() const;
  sl_expertstore_layer_stats layer_stats(uint32_t layer) const;  // zeros when the store has none

 private:
  ExpertStoreHandle(const sl_expertstore_api* api, sl_expertstore* store, std::string name, uint32_t n_parts)
      : api_(api), store_(store), name_(std::move(name)), n_parts_(n_parts) {}
  bool stable_ = false;
  const sl_expertstore_api* api_;
  sl_expertstore* store_;
  std::string name_;
  uint32_t n_parts_;
};

}  // namespace sluice
