#pragma once
// C++ side of the backend boundary: an opened backend (RAII over sl_backend) and its buffers.
// Every call returns a Status carrying the plugin's message; nothing here throws.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "sluice/backend.h"
#include "util/result.h"

namespace sluice {

class BackendHandle;

// A device buffer; freed through its backend when destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const BackendHandle* owner, sl_buffer* raw, uint64_t bytes) : owner_(owner), raw_(raw), bytes_(bytes) {}
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  sl_buffer* get() const { return raw_; }
  uint64_t bytes() const { return bytes_; }
  explicit operator bool() const { return raw_ != nullptr; }

 private:
  void reset();
  const BackendHandle* owner_ = nullptr;
  sl_buffer* raw_ = nullptr;
  uint64_t bytes_ = 0;
};

class BackendHandle {
 public:
  // options: sl_backend_config.options, the backend's own (e.g. OpenCL's "tune.att_wg=128").
  static Result<std::unique_ptr<BackendHandle>> open(const sl_backend_api* api, const std::string& name,
                                                     const std::string& device, unsigned n_threads,
                                                     const std::string& options = "");
  ~BackendHandle();
  BackendHandle(const BackendHandle&) = delete;
  BackendHandle& operator=(const BackendHandle&) = delete;

  const sl_backend_api* api() const { return api_; }
  sl_backend* raw() const { return be_; }
  const std::string& name() const { return name_; }
  const sl_device_info& device() const { return device_; }
  std::string description() const;  // "cpu: AMD EPYC (2 threads)"

  Result<Buffer> alloc(uint64_t bytes) const;
  Result<Buffer> wrap_host(const void* host, uint64_t bytes) const;
  Status upload(const Buffer& dst, uint64_t offset, const void* src, uint64_t bytes) const;
  Status download(const Buffer& src, uint64_t offset, void* dst, uint64_t bytes) const;
  Status synchronize() const;
  // Starts a download after the work issued so far; the ticket is waited for once (download_wait).
  Result<uint64_t> download_begin(const Buffer& src, uint64_t offset, void* dst, uint64_t bytes) const;
  Status download_wait(uint64_t ticket) const;

  // Whether the backend runs the node as given (its tensors: the graph's), kv: the cache's layout
  // for KV_WRITE and ATTENTION.
  bool supports(const sl_node& node, std::span<const sl_tensor> tensors, const sl_kv_layout* kv = nullptr) const;
  // Whether it runs op (EMBED or MATMUL) with weight w in its form (dtype, quantization).
  bool runs_weight(sl_op op, const sl_weight& w) const;
  // Whether it multiplies [rows, cols] MXFP4 weights in place (sluice/graph.h): a backend of ABI 2.3
  // or later whose supports_node takes the form (an earlier one cannot know it, whatever it answers).
  bool runs_mxfp4(uint32_t rows, uint32_t cols) const;
  // Whether it runs HEAD_MATMUL (ABI 2.4) with weight w and these slices: a backend of 2.4 or later
  // whose supports_node takes the node (an earlier one cannot know the op).
  bool runs_head_matmul(const sl_weight& w, const sl_head_matmul_params& p) const;
  // Whether it chooses Mixture-of-Experts experts on the device (ABI 2.5, a backend of 2.5 or later
  // whose supports_node takes them): MOE_ROUTE over n_experts logits by `route`, MATMUL_ID with each
  // stacked weight ([n_experts · rows, cols]; the last one's rows are the block's width) and MOE_COMBINE.
  bool runs_device_routing(uint32_t n_experts, const sl_moe_route_params& route, std::span<const sl_weight> stacked) const;
  bool has_cap(uint32_t cap) const { return (device_.caps & cap) != 0; }
  // Recurrent layers' state (2.0): whether the backend keeps it (SL_CAP_KV_LAYERS and both entry
  // points), and its two entry points.
  bool keeps_state() const;
  Status copy_state(sl_kv_cache* cache, uint32_t src_slot, uint32_t dst_slot) const;
  Status clear_state(sl_kv_cache* cache, uint32_t slot) const;
  // One page of every FULL layer copied to another (kv_copy_page: a sequence forked mid-page).
  Status copy_page(sl_kv_cache* cache, uint32_t src_page, uint32_t dst_page) const;
  // Runs a step graph (asynchronously where the device queues work).
  Status compute(const sl_graph& graph, const sl_step& step) const;

  // Turns a plugin call's status into a Status with the op's name and the plugin's message.
  Status check(sl_status status, const sl_error& err, const char* what) const;

 private:
  BackendHandle(const sl_backend_api* api, sl_backend* be, std::string name)
      : api_(api), be_(be), name_(std::move(name)) {}
  const sl_backend_api* api_;
  sl_backend* be_;
  std::string name_;
  sl_device_info device_{};
};

}  // namespace sluice
