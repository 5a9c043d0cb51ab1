#pragma once
// Writes a model's tensors as safetensors, streaming: the whole layout (names, dtypes, shapes, shard
// split) is planned first, so each file's header is written before its data and the data then goes to
// disk in order, a chunk at a time — no tensor, let alone the model, is ever held whole in memory.
// More than max_shard_bytes of data is split into model-0000i-of-0000n.safetensors files with a
// model.safetensors.index.json, as Hugging Face and MLX save them.
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "util/result.h"

namespace sluice::quant {

struct TensorPlan {
  std::string name;
  DType dtype = DType::kBF16;
  std::vector<int64_t> shape;
  uint64_t bytes() const;
};

class SafetensorsWriter {
 public:
  static constexpr uint64_t kDefaultShardBytes = 5ull << 30;  // as mlx-lm: 5 GB files

  // Tensors are written in plan order. metadata: the "__metadata__" strings (e.g. format=mlx).
  static Result<SafetensorsWriter> create(const std::filesystem::path& dir, std::vector<TensorPlan> plan,
                                          uint64_t max_shard_bytes = kDefaultShardBytes,
                                          std::vector<std::pair<std::string, std::string>> metadata = {{"format", "mlx"}});
  SafetensorsWriter(SafetensorsWriter&&) noexcept;
  SafetensorsWriter& operator=(SafetensorsWriter&&) noexcept;
  ~SafetensorsWriter();

  // Appends bytes to the current tensor (the first of the plan not yet full); a chunk may not run
  // past the current tensor's end.
  Status append(std::span<const std::byte> bytes);
  template <class T>
  Status append_values(std::span<const T> v) {
    return append(std::as_bytes(v));
  }
  // Which tensor the next append goes to (plan index), plan().size() once all are written.
  std::size_t current() const { return current_; }
  const std::vector<TensorPlan>& plan() const { return plan_; }
  // Checks every tensor was written in full, closes the files and writes the index when sharded.
  Status finish();

 private:
  SafetensorsWriter() = default;
  Status open_shard(std::size_t shard);
  Status flush();

  std::filesystem::path dir_;
  std::vector<TensorPlan> plan_;
  std::vector<std::size_t> shard_of_;      // per tensor
  std::vector<std::string> shard_names_;
  std::vector<std::string> shard_headers_;
  int fd_ = -1;
  std::size_t open_shard_ = SIZE_MAX;
  std::size_t current_ = 0;
  uint64_t written_in_tensor_ = 0;
  std::vector<std::byte> buffer_;
};

}  // namespace sluice::quant
