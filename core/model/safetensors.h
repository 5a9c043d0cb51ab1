#pragma once
// safetensors files, single or sharded (model.safetensors.index.json), memory-mapped and used in place.
// Headers are validated before use: size limits, JSON, dtype names, shape × dtype = byte length,
// offsets inside the data area, no two tensors overlapping. Every error names the file and tensor.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "util/file_io.h"
#include "util/result.h"

namespace sluice {

enum class DType { kF32, kF16, kBF16, kU32, kI32, kU8, kI8 };
const char* to_string(DType dtype);
std::size_t dtype_size(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // inside the file's mapping
  uint64_t bytes = 0;
  uint32_t file_index = 0;          // which file of the SafetensorsSet
  uint64_t file_offset = 0;         // absolute byte offset of the data in that file
  int64_t numel() const;
};

// One memory-mapped .safetensors file.
class SafetensorsFile {
 public:
  // allowed: dtypes accepted (others are a clear error naming the tensor and dtype).
  static Result<SafetensorsFile> open(const std::filesystem::path& path);
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const MappedFile& mapping() const { return *file_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All the tensors of a model folder: model.safetensors, or the shards listed by
// model.safetensors.index.json (each shard must exist and hold the tensors the index names).
class SafetensorsSet {
 public:
  static Result<SafetensorsSet> open_dir(const std::filesystem::path& dir);
  const TensorInfo* find(const std::string& name) const;
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }
  const std::vector<std::filesystem::path>& files() const { return paths_; }
  uint64_t total_bytes() const;

 private:
  std::vector<SafetensorsFile> files_;
  std::vector<std::filesystem::path> paths_;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace sluice
