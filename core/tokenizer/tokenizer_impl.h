#pragma once
// Tokenizer's internal state, shared by tokenizer.cpp and streaming_decoder.cpp.
#include <memory>
#include <optional>
#include <string>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/post_processors.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/tokenizer.h"

namespace sluice {

struct Tokenizer::Impl {
  std::unique_ptr<tokenizer::BpeModel> model;
  std::unique_ptr<const tokenizer::Normalizer> normalizer;
  std::unique_ptr<const tokenizer::PreTokenizer> pre_tokenizer;
  std::unique_ptr<const tokenizer::PostProcessor> post_processor;
  std::unique_ptr<const tokenizer::Decoder> decoder;
  tokenizer::AddedVocabulary added;
  std::optional<int32_t> bos_id, eos_id;

  // The string an id stands for (added token content first), or nullptr for an unknown id.
  const std::string* token_string(int32_t id) const {
    if (const auto* token = added.by_id(id)) return &token->content;
    return model->id_to_token(id);
  }
};

}  // namespace sluice
