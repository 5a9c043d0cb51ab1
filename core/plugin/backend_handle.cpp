#include "plugin/backend_handle.h"

#include <algorithm>
#include <array>
#include <initializer_list>
#include <utility>

#include "graph/tensor_desc.h"
#include "plugin/plugin_registry.h"  // table_has
#include "util/mxfp4.h"

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
                                                           const std::string& device, unsigned n_threads,
                                                           const std::string& options) {
  sl_backend_config config{};
  config.struct_size = sizeof(config);
  config.device = device.c_str();
  config.n_threads = n_threads;
  config.options = options.c_str();
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

bool BackendHandle::keeps_state() const {
  return has_cap(SL_CAP_KV_LAYERS) && table_has(api_, &sl_backend_api::kv_copy_state) && table_has(api_, &sl_backend_api::kv_clear_state);
}

Status BackendHandle::copy_state(sl_kv_cache* cache, uint32_t src_slot, uint32_t dst_slot) const {
  if (!keeps_state()) return make_error("backend '" + name_ + "' keeps no recurrent state");
  sl_error err{};
  return check(api_->kv_copy_state(be_, cache, src_slot, dst_slot, &err), err, "kv_copy_state");
}

Status BackendHandle::clear_state(sl_kv_cache* cache, uint32_t slot) const {
  if (!keeps_state()) return make_error("backend '" + name_ + "' keeps no recurrent state");
  sl_error err{};
  return check(api_->kv_clear_state(be_, cache, slot, &err), err, "kv_clear_state");
}

Status BackendHandle::copy_page(sl_kv_cache* cache, uint32_t src_page, uint32_t dst_page) const {
  sl_error err{};
  return check(api_->kv_copy_page(be_, cache, src_page, dst_page, &err), err, "kv_copy_page");
}

bool BackendHandle::supports(const sl_node& node, std::span<const sl_tensor> tensors, const sl_kv_layout* kv) const {
  sl_node_query q{};
  q.struct_size = sizeof(q);
  q.node = &node;
  q.tensors = tensors.data();
  q.n_tensors = static_cast<uint32_t>(tensors.size());
  q.kv = kv;
  return api_->supports_node(be_, &q) == 1;
}

bool BackendHandle::runs_mxfp4(uint32_t rows, uint32_t cols) const {
  if (SL_ABI_VERSION_MINOR(api_->abi_version) < 3) return false;
  return runs_weight(SL_OP_MATMUL, mxfp4::weight_form(rows, cols));
}

namespace {

// The tensors of a probe node: one-row f32 activations, and w at `weight_at`.
std::array<sl_tensor, 3> probe_tensors(const sl_weight& w, std::size_t weight_at) {
  std::array<sl_tensor, 3> tensors = {buffer_tensor(1, 0), buffer_tensor(1, 0), buffer_tensor(1, 0)};
  tensors[weight_at] = weight_tensor(w);
  return tensors;
}

// A node of `op` reading tensors `in` and writing tensors `out`.
sl_node probe_node(sl_op op, std::initializer_list<uint32_t> in, std::initializer_list<uint32_t> out, const void* params) {
  sl_node n{};
  n.struct_size = sizeof(n);
  n.op = op;
  std::fill(std::begin(n.inputs), std::end(n.inputs), SL_NO_TENSOR);
  std::fill(std::begin(n.outputs), std::end(n.outputs), SL_NO_TENSOR);
  std::copy(in.begin(), in.end(), n.inputs);
  std::copy(out.begin(), out.end(), n.outputs);
  n.params = params;
  return n;
}

// A node of `op` reading tensors a then b and writing tensor 2.
sl_node probe_node(sl_op op, uint32_t a, uint32_t b, const void* params) { return probe_node(op, {a, b}, {2}, params); }

}  // namespace

bool BackendHandle::runs_head_matmul(const sl_weight& w, const sl_head_matmul_params& p) const {
  if (SL_ABI_VERSION_MINOR(api_->abi_version) < 4) return false;
  auto tensors = probe_tensors(w, 1);
  tensors[0].cols = p.n_heads * (p.transpose ? p.slice_rows : w.cols);
  tensors[2].cols = p.n_heads * (p.transpose ? w.cols : p.slice_rows);
  sl_head_matmul_params kept = p;
  kept.struct_size = sizeof(kept);
  return supports(probe_node(SL_OP_HEAD_MATMUL, 0, 1, &kept), tensors, nullptr);
}

bool BackendHandle::runs_device_routing(uint32_t n_experts, const sl_moe_route_params& route, std::span<const sl_weight> stacked) const {
  if (SL_ABI_VERSION_MINOR(api_->abi_version) < 5 || n_experts == 0 || route.k == 0) return false;
  sl_moe_route_params rp = route;
  rp.struct_size = sizeof(rp);
  const std::array<sl_tensor, 3> route_tensors = {buffer_tensor(1, n_experts), buffer_tensor(1, route.k, SL_DTYPE_I32),
                                                  buffer_tensor(1, route.k)};
  if (!supports(probe_node(SL_OP_MOE_ROUTE, {0}, {1, 2}, &rp), route_tensors)) return false;
  sl_matmul_id_params mp{sizeof(sl_matmul_id_params), n_experts};
  for (const sl_weight& w : stacked) {
    if (w.rows % n_experts) return false;
    const std::array<sl_tensor, 4> t = {buffer_tensor(1, w.cols), weight_tensor(w), buffer_tensor(1, route.k, SL_DTYPE_I32),
                                        buffer_tensor(route.k, w.rows / n_experts)};
    if (!supports(probe_node(SL_OP_MATMUL_ID, {0, 1, 2}, {3}, &mp), t)) return false;
  }
  const uint32_t H = stacked.empty() ? 1 : stacked.back().rows / n_experts;
  const std::array<sl_tensor, 3> combine = {buffer_tensor(route.k, H), buffer_tensor(1, route.k), buffer_tensor(1, H)};
  return supports(probe_node(SL_OP_MOE_COMBINE, {0, 1}, {2}, nullptr), combine);
}

bool BackendHandle::runs_weight(sl_op op, const sl_weight& w) const {
  // A node of the op with the weight where that op takes it (EMBED: the table; MATMUL: the
  // weight), the other tensors plain activations.
  auto tensors = probe_tensors(w, 0);
  tensors[1].dtype = op == SL_OP_EMBED ? SL_DTYPE_I32 : SL_DTYPE_F32;
  tensors[1].cols = op == SL_OP_EMBED ? 1 : w.cols;
  tensors[2].cols = op == SL_OP_EMBED ? w.cols : w.rows;
  const sl_node n = op == SL_OP_EMBED ? probe_node(op, 0, 1, nullptr) : probe_node(op, 1, 0, nullptr);
  return supports(n, tensors, nullptr);
}

Status BackendHandle::compute(const sl_graph& graph, const sl_step& step) const {
  sl_error err{};
  return check(api_->graph_compute(be_, &graph, &step, &err), err, "graph_compute");
}

Result<uint64_t> BackendHandle::download_begin(const Buffer& src, uint64_t offset, void* dst, uint64_t bytes) const {
  sl_error err{};
  uint64_t ticket = 0;
  if (auto s = check(api_->download_begin(be_, src.get(), offset, dst, bytes, &ticket, &err), err, "download_begin"); !s) return s.error();
  return ticket;
}

Status BackendHandle::download_wait(uint64_t ticket) const {
  sl_error err{};
  return check(api_->download_wait(be_, ticket, &err), err, "download_wait");
}

}  // namespace sluice
