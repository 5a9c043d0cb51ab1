#include "util/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>

namespace sluice {

Result<std::string> read_text_file(const std::filesystem::path& path, std::size_t max_bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open " + path.string() + ": " + std::strerror(errno));
  // A regular file's size is known up front: refuse an oversized one before allocating for it.
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return make_error(path.string() + ": file of " + std::to_string(st.st_size) + " bytes is larger than the " +
                      std::to_string(max_bytes) + "-byte limit");
  }
  auto text = read_all(fd, max_bytes, path.string(), S_ISREG(st.st_mode) ? static_cast<std::size_t>(st.st_size) : 0);
  ::close(fd);
  return text;
}

Result<std::string> read_all(int fd, std::size_t max_bytes, const std::string& what, std::size_t expected_bytes) {
  std::string out;
  out.reserve(std::min(expected_bytes, max_bytes));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) return out;
    if (n < 0) {
      if (errno == EINTR) continue;
      return make_error("cannot read " + what + ": " + std::strerror(errno));
    }
    if (static_cast<std::size_t>(n) > max_bytes - out.size())
      return make_error(what + ": more than " + std::to_string(max_bytes) + " bytes (the input limit)");
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

Result<MappedFile> MappedFile::open(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open " + path.string() + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return make_error("cannot stat " + path.string() + ": " + std::strerror(e));
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<std::size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      return make_error("cannot map " + path.string() + ": " + std::strerror(e));
    }
    file.data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
      path_(std::move(other.path_)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    path_ = std::move(other.path_);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
}

}  // namespace sluice
