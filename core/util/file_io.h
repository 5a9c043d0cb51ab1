#pragma once
// Reading whole files and mapping files read-only into memory.
#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

#include "util/result.h"

namespace sluice {

// A whole file's bytes. Bounded: a file (or pipe, or device) holding more than max_bytes is an error
// naming the limit, found without reading past it. The default fits any text file a model ships.
inline constexpr std::size_t kMaxTextFileBytes = std::size_t{1} << 30;
Result<std::string> read_text_file(const std::filesystem::path& path, std::size_t max_bytes = kMaxTextFileBytes);

// Everything readable from an open descriptor (stdin, a pipe) up to end of input, at most max_bytes;
// `what` names the source in errors; expected_bytes (when known) is reserved up front.
Result<std::string> read_all(int fd, std::size_t max_bytes, const std::string& what, std::size_t expected_bytes = 0);

// A read-only memory map of a whole file; unmapped on destruction. Move-only.
class MappedFile {
 public:
  static Result<MappedFile> open(const std::filesystem::path& path);
  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<const std::byte> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::filesystem::path path_;
};

}  // namespace sluice
