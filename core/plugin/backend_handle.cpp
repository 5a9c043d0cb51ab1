#include "plugin/backend_handle.h"

#include <utility>

namespace sluice {

Buffer::Buffer(Buffer&& o) noexcept
    : owner_(std::exchange(o.owner_, nullptr)), raw_(std::exchange(o.raw_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    owner_ = std::exchange(o.owner_, nullptr);
    raw_ = std::exchange(o.raw_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

Buffer::~Buffer() { reset(); }

void Buffer::reset() {
  if (raw_ && owner_) owner_->api()->free(owner_->raw(), raw_);
  raw_ = nullptr;
}

Result<std::unique_ptr<BackendHandle>> BackendHandle::open(const sl_backend_api* api, const std::string& name,
                                                           const std::string& device, unsigned n_threads) {
  sl_backend_config config{};
  config.struct_size = sizeof(config);
  config.device = device.c_str();
  config.n_threads = n_threads;
  config.options = "";
  sl_backend* be = nullptr;
  sl_error err{};
  if (api->create(&config, &be, &err) != SL_OK || !be)
    return make_error("backend '" + name + "' could not start: " + err.message);
  std::unique_ptr<BackendHandle> handle(new BackendHandle(api, be, name));
  handle->device_.struct_size = sizeof(sl_device_info);
  if (api->get_device_info && api->get_device_info(be, &handle->device_, &err) != SL_OK)
    handle->device_.name[0] = '\0';
  return handle;
}

BackendHandle::~BackendHandle() { api_->destroy(be_); }

std::string BackendHandle::description() const {
  std::string s = name_;
  if (device_.name[0]) s += std::string(": ") + device_.name;
  if (std::string(device_.kind) == "cpu") s += " (" + std::to_string(device_.compute_units) + " threads)";
  return s;
}

Status BackendHandle::check(sl_status status, const sl_error& err, const char* what) const {
  if (status == SL_OK) return {};
  return make_error(name_ + " backend: " + what + ": " + (err.message[0] ? err.message : "failed"));
}

Result<Buffer> BackendHandle::alloc(uint64_t bytes) const {
  sl_buffer* raw = nullptr;
  sl_error err{};
  if (auto s = check(api_->alloc(be_, bytes, &raw, &err), err, "alloc"); !s) return s.error();
  return Buffer(this, raw, bytes);
}

Result<Buffer> BackendHandle::wrap_host(const void* host, uint64_t bytes) const {
  sl_buffer* raw = nullptr;
  sl_error err{};
  if (auto s = check(api_->wrap_host(be_, host, bytes, &raw, &err), err, "wrap_host"); !s) return s.error();
  return Buffer(this, raw, bytes);
}

Status BackendHandle::upload(const Buffer& dst, uint64_t offset, const void* src, uint64_t bytes) const {
  sl_error err{};
  return check(api_->upload(be_, dst.get(), offset, src, bytes, &err), err, "upload");
}

Status BackendHandle::download(const Buffer& src, uint64_t offset, void* dst, uint64_t bytes) const {
  sl_error err{};
  return check(api_->download(be_, src.get(), offset, dst, bytes, &err), err, "download");
}

Status BackendHandle::synchronize() const {
  sl_error err{};
  return check(api_->synchronize(be_, &err), err, "synchronize");
}

bool BackendHandle::supports(const sl_op_query& query) const {
  return api_->supports_op && api_->supports_op(be_, &query) == 1;
}

}  // namespace sluice
