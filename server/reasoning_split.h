#pragma once
// Splits a `<think>`-style model's answer into its reasoning (between <think> and </think>) and its
// content, as the text streams in piece by piece. Tags may arrive split across tokens at any byte:
// bytes that could still begin a tag are held until they cannot. The reasoning starts either
// because the prompt already opened `<think>` (DeepSeek-R1's generation prompt does), or because the
// answer opens with it (after whitespace); otherwise everything is content. A missing closing tag
// leaves everything after the opening in the reasoning. Whitespace that opens the reasoning or
// follows </think> is dropped (the "\n" after <think>, the "\n\n" after </think>); an answer with no
// reasoning passes verbatim; a later `<think>` in the content is content.
#include <string>
#include <string_view>

namespace sluice::server {

struct SplitText {
  std::string reasoning;
  std::string content;
  bool empty() const { return reasoning.empty() && content.empty(); }
};

class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool prompt_opened_think);

  SplitText push(std::string_view text);  // what is decided by this piece
  SplitText flush();                      // end of the answer: what was held back

 private:
  enum class State { kBeforeThink, kReasoning, kContent };
  void run(SplitText& out);

  State state_;
  bool at_part_start_ = true;  // no byte of the current part emitted yet: whitespace is dropped
  std::string pending_;        // bytes not decided yet (a possible tag prefix)
};

// The prompt ends inside an opened think block: `<think>` then only whitespace.
bool prompt_opens_think(std::string_view prompt);

}  // namespace sluice::server
