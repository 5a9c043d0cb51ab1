#pragma once
// Tokenizer: loads a Hugging Face tokenizer.json and encodes/decodes exactly as HF tokenizers does.
//
// encode: input -> added tokens split out (raw text) -> normalizer -> added tokens split out
//         (normalized text) -> pre-tokenizer -> BPE per word -> [post-processor]
// decode: ids -> token strings -> decoder chain -> joined text
//
// A Tokenizer is immutable after load and safe to use from several threads; copies share state.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/result.h"

namespace sluice {

class Tokenizer {
 public:
  static Result<Tokenizer> load(const std::filesystem::path& tokenizer_json);
  // dir/tokenizer.json, plus dir/tokenizer_config.json (when present) for the bos/eos token names.
  static Result<Tokenizer> load_from_model_dir(const std::filesystem::path& dir);
  // From the text of a tokenizer.json (`what` names it in errors).
  static Result<Tokenizer> from_json_text(std::string_view json, const std::string& what = "tokenizer.json");

  // add_special_tokens applies the post_processor (e.g. TemplateProcessing adding BOS) as HF does.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // raw vocab string; empty for an unknown id
  bool is_special(int32_t id) const;
  // The raw bytes a token adds in the middle of a text (added tokens: their content). Unlike
  // decode({id}) no UTF-8 repair and no first-token rule applies. Empty for an unknown id.
  std::string token_bytes(int32_t id) const;
  std::size_t vocab_size() const;  // max id + 1 over vocab and added tokens

  // From tokenizer_config.json (load_from_model_dir only); nullopt when absent or null.
  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
  friend class StreamingDecoder;
};

// Streaming-safe decoding: push ids one at a time, get only complete UTF-8 text, never half a
// character. The concatenation of every push() and the final flush() equals decode(all ids).
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tok);
  StreamingDecoder(const Tokenizer& tok, bool skip_special_tokens);
  std::string push(int32_t id);  // newly completed text (possibly empty)
  std::string flush();           // whatever is left (invalid bytes replaced by U+FFFD)

 private:
  std::string settled_text(bool final);
  bool cut_window(const std::string& text, std::size_t settled_ids);

  Tokenizer tokenizer_;
  bool skip_special_tokens_ = false;
  // The ids still needed to decode the tail: a context prefix whose text was already emitted, then
  // the ids pushed since. Decoding the window (not just the new ids) keeps first-token rules such
  // as SentencePiece's leading-space strip and multi-token UTF-8 characters right.
  std::vector<int32_t> window_;
  std::size_t emitted_bytes_ = 0;  // bytes of decode(window_) already returned
  std::size_t next_cut_at_ = 0;    // window length at which cut_window is tried again
};

}  // namespace sluice
