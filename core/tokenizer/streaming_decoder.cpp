// StreamingDecoder: decode the window of recent ids, emit only the part of its text that no later id
// can change, and cut the window back once what lies before a cut is emitted and final.
#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace sluice {

namespace {

// Once the window is this long and settled, it is cut back to its last id (keeps push O(1)).
constexpr std::size_t kCompactAfterIds = 8;
// Cut points tried, from the newest back, when the window did not settle as a whole.
constexpr std::size_t kCutCandidates = 4;

bool is_byte_token(const std::string* token) {
  return token != nullptr && token->size() == 6 && token->compare(0, 3, "<0x") == 0 && (*token)[5] == '>';
}

// Drops one trailing U+FFFD: at the end of a window it may stand for a character whose remaining
// bytes have not arrived yet. Only the last one can: invalid UTF-8 becomes one U+FFFD per maximal
// invalid subsequence (utf8_lossy), so a replacement with bytes after it is final, and a character
// cut short by the window's end is a single one.
std::size_t without_trailing_replacement(const std::string& text) {
  const auto r = tokenizer::kReplacementChar;
  if (text.size() >= r.size() && text.compare(text.size() - r.size(), r.size(), r) == 0) return text.size() - r.size();
  return text.size();
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
  next_cut_at_ = 0;
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
  if (final || window_.size() <= kCompactAfterIds) return fresh;
  if (all_settled && stable_tail) {
    // The last id becomes the context for what follows. Its own text must be non-empty and clean so
    // that decode(context + later) == decode(context) + (text of later) holds: a first-token rule
    // (leading-space strip) then applies inside the context, as it did in the full sequence.
    int32_t last = window_.back();
    std::string context_text = tokenizer_.decode(std::span(&last, 1), skip_special_tokens_);
    if (!context_text.empty() && context_text.find(tokenizer::kReplacementChar) == std::string::npos) {
      window_.assign(1, last);
      emitted_bytes_ = context_text.size();
      next_cut_at_ = 0;
      return fresh;
    }
  }
  if (window_.size() >= next_cut_at_ && !cut_window(text, settled_ids)) next_cut_at_ = 2 * window_.size();
  return fresh;
}

// A window that does not settle as a whole (a run of invalid bytes keeps a U+FFFD at its end) would
// be decoded whole at every push: quadratic in the stream's length. Cut it at an id c where the text
// of the settled ids splits, decode(ids before c) + decode(ids from c) == text, with all of the first
// part already emitted. c lies before the settled ids end, so no unfinished run of byte tokens spans
// it and what arrives later only extends the second part: for UTF-8 assembly the check fails exactly
// when a character spans c and is not finished yet, and a first-token rule (a leading-space strip)
// that would change the id at c fails it too. Failed attempts back off geometrically (next_cut_at_),
// so their cost stays linear.
bool StreamingDecoder::cut_window(const std::string& text, std::size_t settled_ids) {
  for (std::size_t tried = 0; tried < kCutCandidates && tried + 1 < settled_ids; ++tried) {
    const std::size_t c = settled_ids - 1 - tried;
    const std::string before = tokenizer_.decode(std::span(window_.data(), c), skip_special_tokens_);
    if (before.size() > emitted_bytes_ || text.compare(0, before.size(), before) != 0) continue;
    const std::string after = tokenizer_.decode(std::span(window_.data() + c, settled_ids - c), skip_special_tokens_);
    if (before.size() + after.size() != text.size() || text.compare(before.size(), std::string::npos, after) != 0) continue;
    window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(c));
    emitted_bytes_ -= before.size();
    next_cut_at_ = 0;
    return true;
  }
  return false;
}

}  // namespace sluice
