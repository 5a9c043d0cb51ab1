#include "quant/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

namespace sluice::quant {
namespace {

constexpr std::size_t kBufferBytes = 8u << 20;

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kU32: return "U32";
    case DType::kI32: return "I32";
    case DType::kU8: return "U8";
    case DType::kI8: return "I8";
  }
  return "F32";
}

Status write_all(int fd, const std::byte* p, std::size_t n, const std::string& what) {
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return make_error("cannot write " + what + ": " + std::strerror(errno));
    }
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return {};
}

}  // namespace

uint64_t TensorPlan::bytes() const {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

SafetensorsWriter::SafetensorsWriter(SafetensorsWriter&& o) noexcept { *this = std::move(o); }
SafetensorsWriter& SafetensorsWriter::operator=(SafetensorsWriter&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    dir_ = std::move(o.dir_);
    plan_ = std::move(o.plan_);
    shard_of_ = std::move(o.shard_of_);
    shard_names_ = std::move(o.shard_names_);
    shard_headers_ = std::move(o.shard_headers_);
    fd_ = o.fd_;
    o.fd_ = -1;
    open_shard_ = o.open_shard_;
    current_ = o.current_;
    written_in_tensor_ = o.written_in_tensor_;
    buffer_ = std::move(o.buffer_);
  }
  return *this;
}
SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Result<SafetensorsWriter> SafetensorsWriter::create(const std::filesystem::path& dir, std::vector<TensorPlan> plan,
                                                    uint64_t max_shard_bytes,
                                                    std::vector<std::pair<std::string, std::string>> metadata) {
  SafetensorsWriter w;
  w.dir_ = dir;
  w.plan_ = std::move(plan);
  if (w.plan_.empty()) return make_error("no tensors to write");
  // Split into shards in plan order.
  std::vector<std::vector<std::size_t>> shards(1);
  uint64_t in_shard = 0;
  for (std::size_t i = 0; i < w.plan_.size(); ++i) {
    const uint64_t b = w.plan_[i].bytes();
    if (max_shard_bytes && in_shard > 0 && in_shard + b > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += b;
  }
  w.shard_of_.resize(w.plan_.size());
  const std::size_t n = shards.size();
  for (std::size_t s = 0; s < n; ++s) {
    char name[64];
    if (n == 1)
      std::snprintf(name, sizeof(name), "model.safetensors");
    else
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, n);
    w.shard_names_.push_back(name);
    rapidjson::StringBuffer sb;
    rapidjson::Writer<rapidjson::StringBuffer> jw(sb);
    jw.StartObject();
    if (!metadata.empty()) {
      jw.Key("__metadata__");
      jw.StartObject();
      for (const auto& [k, v] : metadata) {
        jw.Key(k.c_str());
        jw.String(v.c_str());
      }
      jw.EndObject();
    }
    uint64_t offset = 0;
    for (std::size_t i : shards[s]) {
      const TensorPlan& t = w.plan_[i];
      w.shard_of_[i] = s;
      jw.Key(t.name.c_str());
      jw.StartObject();
      jw.Key("dtype");
      jw.String(dtype_name(t.dtype));
      jw.Key("shape");
      jw.StartArray();
      for (int64_t d : t.shape) jw.Int64(d);
      jw.EndArray();
      jw.Key("data_offsets");
      jw.StartArray();
      jw.Uint64(offset);
      jw.Uint64(offset + t.bytes());
      jw.EndArray();
      jw.EndObject();
      offset += t.bytes();
    }
    jw.EndObject();
    std::string header = sb.GetString();
    // Data starts 64-byte aligned (8-byte length + header): tensors whose sizes are multiples of 16
    // keep 16-byte alignment, which the GPU backends' widest loads need (the format allows no gaps
    // between tensors, only trailing spaces in the header).
    header.append((64 - (8 + header.size()) % 64) % 64, ' ');
    w.shard_headers_.push_back(std::move(header));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error("cannot create " + dir.string() + ": " + ec.message());
  // Weights of an earlier run into the same folder (another shard count) must not survive: a stale
  // index would point the loader at them.
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("model") && (name.ends_with(".safetensors") || name == "model.safetensors.index.json"))
      std::filesystem::remove(entry.path(), ec);
  }
  w.buffer_.reserve(kBufferBytes);
  if (auto s = w.open_shard(0); !s) return s.error();
  // Skip empty tensors at the start.
  while (w.current_ < w.plan_.size() && w.plan_[w.current_].bytes() == 0) ++w.current_;
  return w;
}

Status SafetensorsWriter::flush() {
  if (buffer_.empty()) return {};
  auto s = write_all(fd_, buffer_.data(), buffer_.size(), (dir_ / shard_names_[open_shard_]).string());
  buffer_.clear();
  return s;
}

Status SafetensorsWriter::open_shard(std::size_t shard) {
  if (fd_ >= 0) {
    if (auto s = flush(); !s) return s;
    if (::close(fd_) != 0) return make_error("cannot close " + (dir_ / shard_names_[open_shard_]).string());
    fd_ = -1;
  }
  const auto path = dir_ / shard_names_[shard];
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) return make_error("cannot create " + path.string() + ": " + std::strerror(errno));
  open_shard_ = shard;
  const std::string& h = shard_headers_[shard];
  std::byte len[8];
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  if (auto s = write_all(fd_, len, 8, path.string()); !s) return s;
  return write_all(fd_, reinterpret_cast<const std::byte*>(h.data()), h.size(), path.string());
}

Status SafetensorsWriter::append(std::span<const std::byte> bytes) {
  if (bytes.empty()) return {};
  if (current_ >= plan_.size()) return make_error("safetensors writer: more data than the plan holds");
  const TensorPlan& t = plan_[current_];
  if (written_in_tensor_ + bytes.size() > t.bytes())
    return make_error("safetensors writer: data for '" + t.name + "' runs past its " + std::to_string(t.bytes()) + " bytes");
  if (shard_of_[current_] != open_shard_)
    if (auto s = open_shard(shard_of_[current_]); !s) return s;
  if (buffer_.size() + bytes.size() > kBufferBytes)
    if (auto s = flush(); !s) return s;
  if (bytes.size() >= kBufferBytes) {
    if (auto s = write_all(fd_, bytes.data(), bytes.size(), (dir_ / shard_names_[open_shard_]).string()); !s) return s;
  } else {
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  }
  written_in_tensor_ += bytes.size();
  if (written_in_tensor_ == t.bytes()) {
    written_in_tensor_ = 0;
    ++current_;
    while (current_ < plan_.size() && plan_[current_].bytes() == 0) ++current_;
  }
  return {};
}

Status SafetensorsWriter::finish() {
  if (current_ < plan_.size())
    return make_error("safetensors writer: tensor '" + plan_[current_].name + "' was not written in full");
  if (fd_ >= 0) {
    if (auto s = flush(); !s) return s;
    if (::close(fd_) != 0) return make_error("cannot close " + (dir_ / shard_names_[open_shard_]).string());
    fd_ = -1;
  }
  // Open shards that held only empty tensors were never created: create them now.
  for (std::size_t s = 0; s < shard_names_.size(); ++s) {
    if (std::filesystem::exists(dir_ / shard_names_[s])) continue;
    if (auto st = open_shard(s); !st) return st;
    ::close(fd_);
    fd_ = -1;
  }
  if (shard_names_.size() == 1) return {};
  uint64_t total = 0;
  for (const auto& t : plan_) total += t.bytes();
  rapidjson::StringBuffer sb;
  rapidjson::Writer<rapidjson::StringBuffer> jw(sb);
  jw.StartObject();
  jw.Key("metadata");
  jw.StartObject();
  jw.Key("total_size");
  jw.Uint64(total);
  jw.EndObject();
  jw.Key("weight_map");
  jw.StartObject();
  for (std::size_t i = 0; i < plan_.size(); ++i) {
    jw.Key(plan_[i].name.c_str());
    jw.String(shard_names_[shard_of_[i]].c_str());
  }
  jw.EndObject();
  jw.EndObject();
  std::ofstream out(dir_ / "model.safetensors.index.json");
  out << sb.GetString() << "\n";
  if (!out) return make_error("cannot write " + (dir_ / "model.safetensors.index.json").string());
  return {};
}

}  // namespace sluice::quant
