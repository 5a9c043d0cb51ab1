#pragma once
// Model files written byte by byte for the model tests: a temp directory, safetensors framing, and
// a minimal config.json.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "model/model_config.h"
#include "util/result.h"

namespace sluice {

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / ("sluice_model_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file: 8-byte length, the header text, then `data_bytes` bytes of data (value = index).
inline std::string safetensors_bytes(const std::string& header, std::size_t data_bytes) {
  std::string s = le64(header.size()) + header;
  for (std::size_t i = 0; i < data_bytes; ++i) s.push_back(static_cast<char>(i & 0xff));
  return s;
}

inline std::string config_json(const std::string& model_type, const std::string& extra = "") {
  return R"({"model_type":")" + model_type +
         R"(","vocab_size":100,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":4,)"
         R"("num_attention_heads":4,"num_key_value_heads":2)" +
         extra + "}";
}

inline Result<ModelConfig> load_config(const TempDir& dir, const std::string& config, const std::string& generation = "") {
  write_bytes(dir.path() / "config.json", config);
  if (!generation.empty()) write_bytes(dir.path() / "generation_config.json", generation);
  return ModelConfig::load(dir.path());
}

}  // namespace sluice
