#include "server_prompts.h"

namespace sluice::cli::bench {
namespace {

// About `words` whitespace-separated words of code; `salt` makes the text differ from the start.
std::string code_text(int words, int salt) {
  std::string s;
  int n = 0, line = 0;
  while (n < words) {
    // 8 words a line: "def f_<salt>_<line>(value): return value * <line> + <salt>"
    s += "def f_" + std::to_string(salt) + "_" + std::to_string(line) + "(value):\n    return value * " + std::to_string(line) + " + " +
         std::to_string(salt) + "\n";
    n += 8;
    ++line;
  }
  return s;
}

}  // namespace

std::vector<LoadRequest> make_load_requests(int n, int shared_prefix_words, const std::vector<int>& prompt_words, uint32_t run) {
  const std::string tag = "run " + std::to_string(run);
  const std::string prefix = shared_prefix_words > 0 ? "# shared context of " + tag + "\n" + code_text(shared_prefix_words, 0) : "";
  std::vector<LoadRequest> out;
  for (int i = 0; i < n; ++i) {
    LoadRequest r;
    r.index = i;
    r.shared_prefix = !prefix.empty() && i % 2 == 0;
    r.own_words = prompt_words[static_cast<std::size_t>(i) % prompt_words.size()];
    // "# request i" first: two requests' own parts differ from their first tokens, so only the shared
    // prefix can come from the prompt cache.
    r.prompt = (r.shared_prefix ? prefix : "") + "# request " + std::to_string(i + 1) + " of " + tag + "\n" + code_text(r.own_words, i + 1);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace sluice::cli::bench
