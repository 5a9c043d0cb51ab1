#include "plugin/expert_store_handle.h"

#include <cstddef>

#include "plugin/plugin_registry.h"
#include "plugin/resident_store.h"

namespace sluice {

Result<std::unique_ptr<ExpertStoreHandle>> ExpertStoreHandle::open(const sl_expertstore_api* api, const std::string& name,
                                                                   const sl_expertstore_config& config) {
  sl_expertstore* store = nullptr;
  sl_error err{};
  if (api->create(&config, &store, &err) != SL_OK || !store)
    return make_error("expert store '" + name + "' could not start: " + err.message);
  std::unique_ptr<ExpertStoreHandle> handle(new ExpertStoreHandle(api, store, name, config.n_parts));
  handle->stable_ = api == builtin_resident_store();
  return handle;
}

ExpertStoreHandle::~ExpertStoreHandle() { api_->destroy(store_); }

Status ExpertStoreHandle::acquire(uint32_t layer, const std::vector<uint32_t>& experts, std::vector<const void*>& parts_out) {
  parts_out.assign(experts.size() * n_parts_, nullptr);
  sl_error err{};
  if (api_->acquire(store_, layer, experts.data(), static_cast<uint32_t>(experts.size()), parts_out.data(), &err) != SL_OK)
    return make_error("expert store '" + name_ + "': " + err.message);
  return {};
}

void ExpertStoreHandle::release(uint32_t layer, const std::vector<uint32_t>& experts) {
  api_->release(store_, layer, experts.data(), static_cast<uint32_t>(experts.size()));
}

void ExpertStoreHandle::prefetch(uint32_t layer, const std::vector<uint32_t>& experts) {
  if (table_has(api_, &sl_expertstore_api::prefetch)) api_->prefetch(store_, layer, experts.data(), static_cast<uint32_t>(experts.size()));
}

sl_expertstore_stats ExpertStoreHandle::stats() const {
  sl_expertstore_stats st{};
  st.struct_size = sizeof(st);
  api_->get_stats(store_, &st);
  return st;
}

sl_expertstore_layer_stats ExpertStoreHandle::layer_stats(uint32_t layer) const {
  sl_expertstore_layer_stats st{};
  st.struct_size = sizeof(st);
  if (table_has(api_, &sl_expertstore_api::get_layer_stats)) api_->get_layer_stats(store_, layer, &st);
  return st;
}

}  // namespace sluice
