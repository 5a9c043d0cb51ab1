#include "hub/hub_id.h"

#include <filesystem>
#include <system_error>

namespace sluice::hub {
namespace {

bool word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// One part of a repo id: 1..96 of [A-Za-z0-9_.-], starting and ending with a letter, digit or '_'.
Status check_part(std::string_view part, std::string_view id) {
  if (part.empty() || part.size() > 96)
    return make_error("'" + std::string(id) + "': each part of a hub id has 1 to 96 characters");
  for (char c : part)
    if (!word_char(c) && c != '-' && c != '.')
      return make_error("'" + std::string(id) + "': a hub id uses letters, digits, '-', '_' and '.'");
  if (!word_char(part.front()) || !word_char(part.back()))
    return make_error("'" + std::string(id) + "': a hub id part cannot start or end with '-' or '.'");
  return {};
}

// Revisions become paths under refs/ (refs/pr/1 nests): no "..", no empty segment, safe characters.
Status check_revision(std::string_view rev) {
  if (rev.empty() || rev.size() > 255) return make_error("a revision after '@' has 1 to 255 characters");
  for (char c : rev)
    if (!word_char(c) && c != '-' && c != '.' && c != '/')
      return make_error("revision '" + std::string(rev) + "': letters, digits, '-', '_', '.' and '/' only");
  if (rev.front() == '/' || rev.back() == '/' || rev.find("//") != std::string_view::npos ||
      rev.find("..") != std::string_view::npos || rev.front() == '.')
    return make_error("revision '" + std::string(rev) + "' is not a branch, tag or commit name");
  return {};
}

}  // namespace

bool is_commit_hash(std::string_view revision) {
  if (revision.size() != 40) return false;
  for (char c : revision)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

Result<HubId> parse_hub_id(std::string_view text) {
  HubId id;
  std::string_view repo = text;
  if (auto at = text.find('@'); at != std::string_view::npos) {
    repo = text.substr(0, at);
    std::string_view rev = text.substr(at + 1);
    if (auto ok = check_revision(rev); !ok) return ok.error();
    id.revision = std::string(rev);
    id.revision_given = true;
  }
  const auto slash = repo.find('/');
  if (slash == std::string_view::npos || repo.find('/', slash + 1) != std::string_view::npos)
    return make_error("'" + std::string(repo) + "': a hub id is org/name");
  if (auto ok = check_part(repo.substr(0, slash), repo); !ok) return ok.error();
  if (auto ok = check_part(repo.substr(slash + 1), repo); !ok) return ok.error();
  // "--" separates the parts of the cache folder's name (models--org--name); ".." could climb out.
  if (repo.find("--") != std::string_view::npos || repo.find("..") != std::string_view::npos)
    return make_error("'" + std::string(repo) + "': a hub id cannot contain '--' or '..'");
  if (repo.size() >= 4 && repo.substr(repo.size() - 4) == ".git")
    return make_error("'" + std::string(repo) + "': a hub id cannot end in .git");
  id.repo = std::string(repo);
  return id;
}

bool names_hub_model(const std::string& model) {
  std::error_code ec;
  if (std::filesystem::exists(model, ec)) return false;
  const std::string repo = model.substr(0, model.find('@'));
  if (repo.empty() || repo.front() == '.' || repo.front() == '/' || repo.front() == '~') return false;
  const auto slash = repo.find('/');
  return slash != std::string::npos && repo.find('/', slash + 1) == std::string::npos;
}

}  // namespace sluice::hub
