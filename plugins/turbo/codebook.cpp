#include "turbo/codebook.h"

namespace sluice::turbo {
namespace {

const CodebookEntry kCodebooks[] = {
#include "turbo/codebook_tables.inc"
};

}  // namespace

std::span<const CodebookEntry> committed_codebooks() { return kCodebooks; }

const CodebookEntry* find_codebook(uint32_t block_dim, uint32_t bits) {
  for (const auto& e : kCodebooks)
    if (e.block_dim == block_dim && e.bits == bits) return &e;
  return nullptr;
}

}  // namespace sluice::turbo
