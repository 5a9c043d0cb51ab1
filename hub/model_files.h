#pragma once
// Which files of a hub repo a model needs: its configuration, tokenizer, chat template and
// safetensors weights (with their index) — not the duplicates many repos also carry (.bin/.pth
// PyTorch pickles, .gguf, ONNX/TensorFlow/Flax exports, files in sub-folders such as onnx/ or original/).
#include <string>
#include <vector>

namespace sluice::hub {

bool model_needs_file(const std::string& filename);
std::vector<std::string> select_model_files(const std::vector<std::string>& repo_files);

}  // namespace sluice::hub
