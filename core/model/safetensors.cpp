#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "util/json.h"

namespace sluice {
namespace {

// A header larger than this is corrupt, not a model: real headers are a few MB at most.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1024 * 1024;
// Real files hold at most tens of thousands of tensors of rank <= 5; beyond these a file is corrupt.
constexpr std::size_t kMaxTensors = 1u << 20;
constexpr std::size_t kMaxRank = 16;

// The header is {name: {dtype, shape: [...], data_offsets: [b, e]}, "__metadata__": {k: v}}: three
// levels deep, so anything deeper is refused while parsing rather than walked.
json::JsonLimits header_json_limits() {
  json::JsonLimits limits;
  limits.max_bytes = kMaxHeaderBytes;
  limits.max_depth = 4;
  limits.max_object_members = kMaxTensors + 1;  // + __metadata__
  limits.max_array_elements = 4 * kMaxRank;  // shapes; a longer one gets the clearer rank error below
  return limits;
}

std::optional<DType> parse_dtype(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  if (name == "U32") return DType::kU32;
  if (name == "I32") return DType::kI32;
  if (name == "U8") return DType::kU8;
  if (name == "I8") return DType::kI8;
  return std::nullopt;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

uint64_t read_le64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(p[i]);
  return v;
}

// Parses one tensor entry of the header; `where` is "<file>: tensor '<name>'".
Result<TensorInfo> parse_tensor(const std::string& name, const rapidjson::Value& entry, const std::string& where,
                                uint64_t data_size) {
  if (!entry.IsObject()) return make_error(where + ": entry is not a JSON object");
  TensorInfo info;
  info.name = name;

  auto dtype_it = entry.FindMember("dtype");
  if (dtype_it == entry.MemberEnd() || !dtype_it->value.IsString())
    return make_error(where + ": 'dtype' missing or not a string");
  std::string dtype_name(dtype_it->value.GetString(), dtype_it->value.GetStringLength());
  auto dtype = parse_dtype(dtype_name);
  if (!dtype)
    return make_error(where + ": unsupported dtype '" + dtype_name +
                      "' (supported: F32, F16, BF16, U32, I32, U8, I8)");
  info.dtype = *dtype;

  auto shape_it = entry.FindMember("shape");
  if (shape_it == entry.MemberEnd() || !shape_it->value.IsArray())
    return make_error(where + ": 'shape' missing or not an array");
  const auto& dims = shape_it->value;
  if (dims.Size() > kMaxRank)
    return make_error(where + ": shape has " + std::to_string(dims.Size()) + " dimensions, more than " +
                      std::to_string(kMaxRank));
  // The byte count must fit, and so must the product of the non-zero dimensions: a zero-sized
  // tensor of shape [0, 2^62, 2^62] would overflow any later arithmetic on its shape.
  const uint64_t elem = dtype_size(info.dtype);
  const uint64_t max_product = static_cast<uint64_t>(INT64_MAX) / elem;
  uint64_t nonzero_product = 1;
  bool has_zero = false, overflow = false;
  for (const auto& dim : dims.GetArray()) {
    if (dim.IsInt64() && dim.GetInt64() < 0) return make_error(where + ": negative dimension in shape");
    if (!dim.IsInt64()) return make_error(where + ": shape entries must be non-negative integers");
    auto d = static_cast<uint64_t>(dim.GetInt64());
    info.shape.push_back(static_cast<int64_t>(d));
    if (d == 0) has_zero = true;
    else if (nonzero_product > max_product / d) overflow = true;
    else nonzero_product *= d;
  }
  if (overflow) return make_error(where + ": shape " + shape_string(info.shape) + " overflows the byte count");
  const uint64_t expected = has_zero ? 0 : nonzero_product * elem;

  auto off_it = entry.FindMember("data_offsets");
  if (off_it == entry.MemberEnd() || !off_it->value.IsArray() || off_it->value.Size() != 2 ||
      !off_it->value[0].IsUint64() || !off_it->value[1].IsUint64())
    return make_error(where + ": 'data_offsets' must be [begin, end] of non-negative integers");
  const uint64_t begin = off_it->value[0].GetUint64();
  const uint64_t end = off_it->value[1].GetUint64();
  if (end < begin)
    return make_error(where + ": data_offsets end " + std::to_string(end) + " < begin " + std::to_string(begin));
  if (end > data_size)
    return make_error(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                      "] run past the data area (" + std::to_string(data_size) + " bytes)");
  if (end - begin != expected)
    return make_error(where + ": shape " + shape_string(info.shape) + " × " + dtype_name + " = " +
                      std::to_string(expected) + " bytes but data_offsets span " + std::to_string(end - begin));
  info.bytes = expected;
  info.file_offset = begin;  // relative for now; made absolute by the caller
  return info;
}

}  // namespace

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kU32: return "U32";
    case DType::kI32: return "I32";
    case DType::kU8: return "U8";
    case DType::kI8: return "I8";
  }
  return "?";
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kU32:
    case DType::kI32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kU8:
    case DType::kI8: return 1;
  }
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path) {
  const std::string file = path.string();
  auto mapped = MappedFile::open(path);
  if (!mapped) return mapped.error();
  auto mapping = std::make_shared<MappedFile>(std::move(*mapped));

  const uint64_t size = mapping->size();
  if (size < 8)
    return make_error(file + ": truncated: " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  const uint64_t header_len = read_le64(mapping->data());
  if (header_len > kMaxHeaderBytes)
    return make_error(file + ": header length " + std::to_string(header_len) + " exceeds the " +
                      std::to_string(kMaxHeaderBytes) + "-byte limit (corrupt file?)");
  if (header_len > size - 8)
    return make_error(file + ": header length " + std::to_string(header_len) + " is longer than the file (" +
                      std::to_string(size - 8) + " bytes after the length field)");
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = size - data_start;

  std::string_view header(reinterpret_cast<const char*>(mapping->data() + 8), header_len);
  auto doc = json::parse(header, file + " header", header_json_limits());
  if (!doc) return doc.error();
  if (!doc->IsObject()) return make_error(file + ": header is not a JSON object");

  SafetensorsFile result;
  for (const auto& m : doc->GetObject()) {
    std::string name(m.name.GetString(), m.name.GetStringLength());
    if (name == "__metadata__") {
      if (!m.value.IsObject()) return make_error(file + ": __metadata__ is not a JSON object");
      for (const auto& kv : m.value.GetObject()) {
        if (!kv.value.IsString())
          return make_error(file + ": __metadata__ value of '" + std::string(kv.name.GetString()) +
                            "' is not a string");
        result.metadata_.emplace(std::string(kv.name.GetString(), kv.name.GetStringLength()),
                                 std::string(kv.value.GetString(), kv.value.GetStringLength()));
      }
      continue;
    }
    auto info = parse_tensor(name, m.value, file + ": tensor '" + name + "'", data_size);
    if (!info) return info.error();
    if (result.tensors_.count(name)) return make_error(file + ": tensor '" + name + "' appears twice in the header");
    result.tensors_.emplace(name, std::move(*info));
  }

  // No two tensors may share bytes: sort by begin and compare each with the furthest end so far.
  std::vector<const TensorInfo*> order;
  order.reserve(result.tensors_.size());
  for (const auto& [_, t] : result.tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const TensorInfo* a, const TensorInfo* b) {
    return a->file_offset != b->file_offset ? a->file_offset < b->file_offset : a->bytes < b->bytes;
  });
  const TensorInfo* furthest = nullptr;
  for (const TensorInfo* t : order) {
    if (t->bytes == 0) continue;
    if (furthest && t->file_offset < furthest->file_offset + furthest->bytes)
      return make_error(file + ": tensor '" + t->name + "' (bytes " + std::to_string(t->file_offset) + ".." +
                        std::to_string(t->file_offset + t->bytes) + ") overlaps tensor '" + furthest->name +
                        "' (bytes " + std::to_string(furthest->file_offset) + ".." +
                        std::to_string(furthest->file_offset + furthest->bytes) + ")");
    if (!furthest || t->file_offset + t->bytes > furthest->file_offset + furthest->bytes) furthest = t;
  }

  for (auto& [_, t] : result.tensors_) {
    t.data = mapping->data() + data_start + t.file_offset;
    t.file_offset += data_start;
  }
  result.file_ = std::move(mapping);
  return result;
}

Result<SafetensorsSet> SafetensorsSet::open_dir(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  SafetensorsSet set;
  const fs::path index_path = dir / "model.safetensors.index.json";
  const fs::path single_path = dir / "model.safetensors";

  // shard file name → tensors the index assigns to it (in index order of first appearance).
  std::vector<std::pair<std::string, std::vector<std::string>>> shards;
  std::unordered_map<std::string, std::size_t> shard_index;
  std::error_code ec;
  if (fs::exists(index_path, ec)) {
    const std::string index = index_path.string();
    auto doc = json::parse_file(index_path);
    if (!doc) return doc.error();
    const auto* weight_map = json::member(*doc, "weight_map");
    if (!weight_map || !weight_map->IsObject()) return make_error(index + ": 'weight_map' missing or not an object");
    for (const auto& m : weight_map->GetObject()) {
      std::string tensor(m.name.GetString(), m.name.GetStringLength());
      if (!m.value.IsString()) return make_error(index + ": shard of tensor '" + tensor + "' is not a string");
      std::string shard(m.value.GetString(), m.value.GetStringLength());
      const fs::path rel(shard);
      if (shard.empty() || rel.is_absolute() || shard.find("..") != std::string::npos)
        return make_error(index + ": tensor '" + tensor + "' names an invalid shard '" + shard + "'");
      auto [at, added] = shard_index.emplace(shard, shards.size());  // a map: an index may list 10^5 tensors
      if (added) shards.emplace_back(shard, std::vector<std::string>{});
      shards[at->second].second.push_back(std::move(tensor));
    }
    if (shards.empty()) return make_error(index + ": 'weight_map' lists no tensors");
    for (const auto& [shard, _] : shards) {
      if (!fs::exists(dir / shard, ec))
        return make_error(index + ": shard '" + shard + "' is missing (expected at " + (dir / shard).string() + ")");
    }
  } else if (fs::exists(single_path, ec)) {
    shards.emplace_back("model.safetensors", std::vector<std::string>{});
  } else {
    return make_error(dir.string() + ": no model.safetensors or model.safetensors.index.json found");
  }

  for (const auto& [shard, expected] : shards) {
    const fs::path path = dir / shard;
    auto file = SafetensorsFile::open(path);
    if (!file) return file.error();
    const auto file_index = static_cast<uint32_t>(set.files_.size());
    for (const auto& name : expected) {
      if (!file->tensors().count(name))
        return make_error(index_path.string() + ": tensor '" + name + "' is assigned to shard '" + shard +
                          "' but that file does not contain it");
    }
    for (const auto& [name, info] : file->tensors()) {
      auto [it, inserted] = set.tensors_.emplace(name, info);
      if (!inserted)
        return make_error(path.string() + ": tensor '" + name + "' is also in " +
                          set.paths_[it->second.file_index].string() + " (duplicate tensor name across shards)");
      it->second.file_index = file_index;
    }
    set.files_.push_back(std::move(*file));
    set.paths_.push_back(path);
  }
  return set;
}

const TensorInfo* SafetensorsSet::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

uint64_t SafetensorsSet::total_bytes() const {
  uint64_t total = 0;
  for (const auto& [_, t] : tensors_) total += t.bytes;
  return total;
}

}  // namespace sluice
