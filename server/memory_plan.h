#pragma once
// `--info`: the memory plan — weights, KV cache bytes per token and at the context size for each
// codec, and whether it fits the memory available (or --mem-limit).
#include <cstdint>
#include <optional>
#include <string>

#include "engine/engine.h"
#include "model/model_config.h"

namespace sluice::server {

// "8G", "512MiB", "1.5g", "1048576" → bytes; nullopt when malformed.
std::optional<uint64_t> parse_byte_size(const std::string& text);
std::string format_bytes(double bytes);

// KV cache bytes per token for a plain codec with `element_bytes` per stored value.
double kv_bytes_per_token(const ModelConfig& config, double element_bytes);

std::string memory_plan_text(const Engine& engine, const std::string& kv_codec, const std::string& mem_limit);

}  // namespace sluice::server
