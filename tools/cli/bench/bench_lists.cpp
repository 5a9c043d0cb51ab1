#include "bench_lists.h"

#include <cctype>
#include <charconv>

namespace sluice::cli::bench {
namespace {

bool continues_previous(const std::string& piece) {
  const auto eq = piece.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  if (piece.compare(0, 2, "k=") == 0) return false;
  const auto colon = piece.find(':');
  return colon == std::string::npos || colon > eq;
}

std::optional<int> to_int(const std::string& s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::vector<std::string> split_items(const std::string& text) {
  std::vector<std::string> items;
  std::string stripped;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) stripped += c;
  std::size_t group_start = 0;
  while (group_start <= stripped.size()) {
    std::size_t group_end = stripped.find(';', group_start);
    if (group_end == std::string::npos) group_end = stripped.size();
    bool first = true;  // the first piece of a ';' group always starts an item
    std::size_t p = group_start;
    while (p <= group_end) {
      std::size_t q = stripped.find(',', p);
      if (q == std::string::npos || q > group_end) q = group_end;
      const std::string piece = stripped.substr(p, q - p);
      if (!piece.empty()) {
        if (!first && !items.empty() && continues_previous(piece)) items.back() += "," + piece;
        else items.push_back(piece);
        first = false;
      }
      p = q + 1;
    }
    group_start = group_end + 1;
  }
  return items;
}

Result<std::vector<int>> parse_int_list(const std::string& text, const char* what, int max) {
  std::vector<int> out;
  for (const auto& piece : split_items(text)) {
    auto v = to_int(piece);
    if (!v || *v < 0 || *v > max)
      return make_error(std::string(what) + ": '" + piece + "' is not an integer from 0 to " + std::to_string(max));
    out.push_back(*v);
  }
  if (out.empty()) return make_error(std::string(what) + ": empty list");
  return out;
}

Result<ExpertStoreItem> parse_expert_store(const std::string& item) {
  ExpertStoreItem e;
  e.label = item;
  const auto at = item.rfind('@');
  e.spec = item.substr(0, at);
  if (e.spec.empty()) return make_error("--expert-stores: '" + item + "' names no store");
  if (at == std::string::npos) return e;
  std::string budget = item.substr(at + 1);
  const bool pct = !budget.empty() && budget.back() == '%';
  if (pct) budget.pop_back();
  auto v = to_int(budget);
  if (!v || *v <= 0 || (pct && *v > 100))
    return make_error("--expert-stores: '" + item + "': the budget after '@' is MiB (uring@512) or a share of the experts (uring@25%)");
  (pct ? e.budget_pct : e.budget_mb) = *v;
  return e;
}

Result<std::string> parse_gpu_layers(const std::string& item) {
  if (item == "all") return std::string();
  if (item == "auto") return item;
  if (auto v = to_int(item); v && *v >= 0) return item;
  return make_error("--gpu-layers: '" + item + "' is not a layer count, 'all' or 'auto'");
}

}  // namespace sluice::cli::bench
