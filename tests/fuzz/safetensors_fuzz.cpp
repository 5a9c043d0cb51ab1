// Fuzzes the safetensors reader: SafetensorsFile::open on the input as a file, or (first byte odd)
// SafetensorsSet::open_dir on a folder with an index (the text before the first NUL) and one shard,
// model.safetensors (the bytes after it). Checks that every tensor the reader accepts lies inside the
// file's data area, matches its shape × dtype, and overlaps no other tensor.
#include <algorithm>
#include <vector>

#include "fuzz_support.h"
#include "model/safetensors.h"

namespace {

using namespace sluice;

void check_tensors(const std::map<std::string, TensorInfo>& tensors, std::span<const std::byte> file) {
  std::vector<const TensorInfo*> order;
  for (const auto& [name, t] : tensors) {
    FUZZ_CHECK(name == t.name);
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      FUZZ_CHECK(d >= 0);
      numel *= static_cast<uint64_t>(d);  // cannot wrap: the reader refused shapes that overflow
    }
    FUZZ_CHECK(numel * dtype_size(t.dtype) == t.bytes, "%s", name.c_str());
    FUZZ_CHECK(t.file_offset >= 8 && t.file_offset <= file.size() && t.bytes <= file.size() - t.file_offset);
    FUZZ_CHECK(t.data == file.data() + t.file_offset);
    if (t.bytes > 0) {
      // Touch both ends so AddressSanitizer sees any read past the mapping.
      volatile std::byte first = t.data[0], last = t.data[t.bytes - 1];
      (void)first;
      (void)last;
      order.push_back(&t);
    }
  }
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->file_offset < b->file_offset; });
  for (std::size_t i = 1; i < order.size(); ++i)
    FUZZ_CHECK(order[i - 1]->file_offset + order[i - 1]->bytes <= order[i]->file_offset, "overlap");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool as_folder = data[0] & 1;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto dir = fuzz::scratch_dir() / "model";
  std::filesystem::create_directories(dir);
  const auto index_path = dir / "model.safetensors.index.json";
  const auto file_path = dir / "model.safetensors";

  if (!as_folder) {
    fuzz::write_file(file_path, input);
    auto file = SafetensorsFile::open(file_path);
    if (file) check_tensors(file->tensors(), file->mapping().bytes());
    else FUZZ_CHECK(!file.message().empty());
    return 0;
  }

  auto [index, shard] = fuzz::split_at_nul(input);
  fuzz::write_file(index_path, index);
  fuzz::write_file(file_path, shard);
  auto set = SafetensorsSet::open_dir(dir);
  std::filesystem::remove(index_path);
  if (!set) {
    FUZZ_CHECK(!set.message().empty());
    return 0;
  }
  FUZZ_CHECK(!set->files().empty());
  uint64_t total = 0;
  for (const auto& [name, t] : set->tensors()) {
    FUZZ_CHECK(set->find(name) == &t && t.file_index < set->files().size());
    total += t.bytes;
  }
  FUZZ_CHECK(total == set->total_bytes());
  return 0;
}
