#pragma once
// The models in the local Hugging Face cache (models--org--name/ folders, as huggingface_hub and
// `sluice download` lay them out), each with its size and an estimate of the memory it needs to serve,
// for the web app's fits / does-not-fit indicator.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace sluice::server {

struct CachedModel {
  std::string id;              // org/name
  std::string commit;          // of refs/main, else the newest snapshot
  std::string snapshot_dir;
  bool complete = false;       // the snapshot has config, tokenizer and every weight file
  std::string missing;         // what it lacks, when not complete
  std::uint64_t disk_bytes = 0;
  std::uint64_t weights_bytes = 0;      // tensor data (from the safetensors headers)
  std::uint64_t kv_bytes_per_token = 0; // f16
  std::uint64_t needed_bytes = 0;       // weights + f16 KV cache for kEstimateContext tokens; 0 when unknown
};

// The context the estimate assumes: what a chat needs, not the model's maximum.
inline constexpr int kEstimateContext = 4096;
// At most this many repos are listed (a cache can hold thousands of datasets and models).
inline constexpr std::size_t kMaxCachedModels = 500;

std::vector<CachedModel> list_cached_models(const std::filesystem::path& cache_root);

}  // namespace sluice::server
