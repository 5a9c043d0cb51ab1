#pragma once
// A model named by its Hugging Face Hub id: `org/name` or `org/name@revision` (a branch, tag or
// commit). The rules are the hub's own (huggingface_hub's validate_repo_id), so a name the hub
// refuses is refused here before any request, and a name cannot escape the cache folder.
#include <optional>
#include <string>
#include <string_view>

#include "util/result.h"

namespace sluice::hub {

struct HubId {
  std::string repo;                 // "org/name"
  std::string revision = "main";    // branch, tag or 40-hex commit
  bool revision_given = false;      // `@revision` was written

  std::string text() const { return revision_given ? repo + "@" + revision : repo; }
};

// Parses `org/name[@revision]`; the error says which rule the text breaks.
Result<HubId> parse_hub_id(std::string_view text);

// Whether a --model value names a hub repo rather than a folder: no file or folder of that name
// exists (a local folder always wins) and it has the shape org/name[@rev] (one '/', not starting
// with '.', '/' or '~'). Whether it is a valid id is parse_hub_id's to say, with a message.
bool names_hub_model(const std::string& model);

bool is_commit_hash(std::string_view revision);  // 40 lowercase hex digits

}  // namespace sluice::hub
