// StreamingDecoder: decode the window of recent ids, emit only the part of its text that no later id
// can change, and shrink the window to a one-id context once everything is settled.
#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace sluice {

namespace {

// Once the window is this long and settled, it is cut back to its last id (keeps push O(1)).
constexpr std::size_t kCompactAfterIds = 8;

bool is_byte_token(const std::string* token) {
  return token != nullptr && token->size() == 6 && token->compare(0, 3, "<0x") == 0 && (*token)[5] == '>';
}

// Drops trailing U+FFFD: at the end of a window they usually stand for a character whose remaining
// bytes have not arrived yet.
std::size_t without_trailing_replacement(const std::string& text) {
  std::size_t end = text.size();
  const auto r = tokenizer::kReplacementChar;
  while (end >= r.size() && text.compare(end - r.size(), r.size(), r) == 0) end -= r.size();
  return end;
}

// Drops the last n characters.
std::size_t without_last_chars(const std::string& text, std::size_t end, std::size_t n) {
  for (std::size_t i = 0; i < n && end > 0; ++i) {
    --end;
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  }
  return end;
}

}  // namespace

StreamingDecoder::StreamingDecoder(const Tokenizer& tok) : StreamingDecoder(tok, false) {}

StreamingDecoder::StreamingDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tokenizer_(tok), skip_special_tokens_(skip_special_tokens) {}

std::string StreamingDecoder::push(int32_t id) {
  if (skip_special_tokens_ && tokenizer_.is_special(id)) return {};  // decode() filters them first too
  window_.push_back(id);
  return settled_text(false);
}

std::string StreamingDecoder::flush() {
  std::string rest = settled_text(true);
  window_.clear();
  emitted_bytes_ = 0;
  return rest;
}

std::string StreamingDecoder::settled_text(bool final) {
  const Tokenizer::Impl& s = *tokenizer_.impl_;
  // A trailing run of <0xNN> tokens is decoded as one unit (invalid as a whole -> one U+FFFD per
  // byte), so none of it is settled until a different token closes the run. Unknown ids close
  // nothing: decode() drops them, joining the byte tokens on either side into one run.
  std::size_t settled_ids = window_.size();
  if (!final) {
    while (settled_ids > 0) {
      const std::string* token = s.token_string(window_[settled_ids - 1]);
      if (token != nullptr && !is_byte_token(token)) break;
      --settled_ids;
    }
  }
  std::string text = tokenizer_.decode(std::span(window_.data(), settled_ids), skip_special_tokens_);
  std::size_t end = text.size();
  if (!final) {
    end = without_trailing_replacement(text);
    if (s.decoder) end = without_last_chars(text, end, s.decoder->unstable_tail_chars());
  }
  std::string fresh;
  if (end > emitted_bytes_) {
    fresh = text.substr(emitted_bytes_, end - emitted_bytes_);
    emitted_bytes_ = end;
  }
  const bool all_settled = settled_ids == window_.size() && end == text.size();
  const bool stable_tail = !s.decoder || s.decoder->unstable_tail_chars() == 0;
  if (!final && all_settled && stable_tail && window_.size() > kCompactAfterIds) {
    // The last id becomes the context for what follows. Its own text must be non-empty and clean so
    // that decode(context + later) == decode(context) + (text of later) holds: a first-token rule
    // (leading-space strip) then applies inside the context, as it did in the full sequence.
    int32_t last = window_.back();
    std::string context_text = tokenizer_.decode(std::span(&last, 1), skip_special_tokens_);
    if (!context_text.empty() && context_text.find(tokenizer::kReplacementChar) == std::string::npos) {
      window_.assign(1, last);
      emitted_bytes_ = context_text.size();
    }
  }
  return fresh;
}

}  // namespace sluice
