// The OpenCL backend's tuning (cl_tuning.h): the fields by name with their accepted values, the
// tuning text's parser, the backend options and the resolution for one device.
//
// Why a line-based text of our own for the table and a user's file, not JSON: the plugin links nothing
// of the host (the bounded JSON parser lives in sluice_util), a `key = value` line is all an entry
// needs, comments say where a value was measured (JSON has none), and a parser of ~100 lines with
// explicit limits and line numbers in its errors is easier to trust with a user's file than a general
// one. The table is embedded at build time as the kernels are (embed_tuning.cmake), so a change to it is
// a change to the repository, reviewed and tested like code (tests/opencl/opencl_tuning_test.cpp).
#include "cl_tuning.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <variant>

namespace sluice::ocl {
namespace {

bool one_of(uint64_t v, std::initializer_list<uint64_t> set) { return std::find(set.begin(), set.end(), v) != set.end(); }

// A decode matvec program's teams (kernels_cl/matvec.cl: Q4_TEAM, R4).
bool q4_shape_ok(TeamShape s) { return one_of(s.team, {32, 64, 128}) && one_of(s.rows, {1, 2, 4, 8}); }
// The residual join's work-group is 32 rows: 32 / rows teams, at most 1024 work-items.
bool res_shape_ok(TeamShape s) { return q4_shape_ok(s) && 32 / s.rows * s.team <= 1024; }

using IntMember = std::variant<uint32_t Tuning::*, uint64_t Tuning::*>;

struct IntField {
  IntMember member;
  bool (*ok)(uint64_t);
};
struct ShapeField {
  TeamShape Tuning::*member;
  bool (*ok)(TeamShape);
};
struct ShapeListField {
  std::vector<ShapeChoice> Tuning::*member;
};

struct Field {
  const char* name;
  std::variant<IntField, ShapeField, ShapeListField> kind;
  const char* accepted;  // in words, for errors
};

// The order of Tuning. Accepted values are the kernels' (a program must build with them) or, for
// thresholds and counts, what keeps the arithmetic in range.
const Field kFields[] = {
    {"q4_base_shape", ShapeField{&Tuning::q4_base_shape, q4_shape_ok}, "TEAMxROWS, team 32, 64 or 128, rows 1, 2, 4 or 8"},
    {"q4_tall_rows", IntField{&Tuning::q4_tall_rows, [](uint64_t v) { return v >= 1 && v <= (1u << 31); }}, "1 to 2^31"},
    {"q4_tall_shape", ShapeField{&Tuning::q4_tall_shape, q4_shape_ok}, "TEAMxROWS, team 32, 64 or 128, rows 1, 2, 4 or 8"},
    {"q4_big_weights", IntField{&Tuning::q4_big_weights, [](uint64_t v) { return v >= 1 && v <= (uint64_t(1) << 62); }},
     "1 to 2^62"},
    {"q4_big_shape", ShapeField{&Tuning::q4_big_shape, q4_shape_ok}, "TEAMxROWS, team 32, 64 or 128, rows 1, 2, 4 or 8"},
    {"q4_warps_per_cu", IntField{&Tuning::q4_warps_per_cu, [](uint64_t v) { return v >= 1 && v <= 1024; }}, "1 to 1024"},
    {"q4_team", IntField{&Tuning::q4_team, [](uint64_t v) { return one_of(v, {0, 32, 64, 128}); }}, "0 (not forced), 32, 64 or 128"},
    {"q4_rows", IntField{&Tuning::q4_rows, [](uint64_t v) { return one_of(v, {0, 1, 2, 4, 8}); }}, "0 (not forced), 1, 2, 4 or 8"},
    {"q4_shape_of", ShapeListField{&Tuning::q4_shape_of},
     "ROWSxCOLS=TEAMxROWS entries separated by ';' (team 32, 64 or 128, rows 1, 2, 4 or 8), or empty"},
    {"maxrreg", IntField{&Tuning::maxrreg, [](uint64_t v) { return v == 0 || (v >= 16 && v <= 255); }}, "0 (no cap) or 16 to 255"},
    {"dp4a", IntField{&Tuning::dp4a, [](uint64_t v) { return v <= 1; }}, "0 or 1"},
    {"dp4a_min_log2", IntField{&Tuning::dp4a_min_log2, [](uint64_t v) { return v >= 10 && v <= 40; }}, "10 to 40"},
    {"glu_blocks", IntField{&Tuning::glu_blocks, [](uint64_t v) { return v <= 1; }}, "0 or 1"},
    {"res_shape", ShapeField{&Tuning::res_shape, res_shape_ok},
     "TEAMxROWS, team 32, 64 or 128, rows 1, 2, 4 or 8, 32 / rows × team at most 1024"},
    {"q4_batch_max_rows", IntField{&Tuning::q4_batch_max_rows, [](uint64_t v) { return v <= 4096; }}, "0 (never) to 4096"},
    {"q4_batch_chunk", IntField{&Tuning::q4_batch_chunk, [](uint64_t v) { return one_of(v, {2, 4, 8, 16}); }}, "2, 4, 8 or 16"},
    {"q4_batch_team_rows", IntField{&Tuning::q4_batch_team_rows, [](uint64_t v) { return one_of(v, {1, 2, 4}); }}, "1, 2 or 4"},
    {"q4_batch_wide_rows", IntField{&Tuning::q4_batch_wide_rows, [](uint64_t v) { return v <= 4096; }}, "0 (none) to 4096"},
    {"q4_batch_wide_team_rows", IntField{&Tuning::q4_batch_wide_team_rows, [](uint64_t v) { return one_of(v, {1, 2, 4}); }},
     "1, 2 or 4"},
    {"q4_batch_dp4a", IntField{&Tuning::q4_batch_dp4a, [](uint64_t v) { return v <= 1; }}, "0 or 1"},
    {"q4_batch_mma", IntField{&Tuning::q4_batch_mma, [](uint64_t v) { return v <= 1; }}, "0 or 1"},
    {"q4_batch_mma_min_rows", IntField{&Tuning::q4_batch_mma_min_rows, [](uint64_t v) { return v >= 2 && v <= 4096; }}, "2 to 4096"},
    {"q4_batch_mma_m_tiles", IntField{&Tuning::q4_batch_mma_m_tiles, [](uint64_t v) { return one_of(v, {1, 2}); }}, "1 or 2"},
    {"q4_batch_mma_warps", IntField{&Tuning::q4_batch_mma_warps, [](uint64_t v) { return one_of(v, {2, 4, 8, 16}); }}, "2, 4, 8 or 16"},
    {"q4_batch_mma_m_warps", IntField{&Tuning::q4_batch_mma_m_warps, [](uint64_t v) { return one_of(v, {1, 2, 4, 8}); }}, "1, 2, 4 or 8"},
    {"q4_batch_mma_groups_per_cu", IntField{&Tuning::q4_batch_mma_groups_per_cu, [](uint64_t v) { return v <= 64; }},
     "0 (keep the m-warps) to 64"},
    {"q4_batch_mma_interleave", IntField{&Tuning::q4_batch_mma_interleave, [](uint64_t v) { return v <= 1; }}, "0 or 1"},
    {"q4_batch_mma_unroll", IntField{&Tuning::q4_batch_mma_unroll, [](uint64_t v) { return one_of(v, {1, 2, 4}); }}, "1, 2 or 4"},
    {"q4_batch_multi", IntField{&Tuning::q4_batch_multi, [](uint64_t v) { return v <= 1; }}, "0 or 1"},
    {"clblast", IntField{&Tuning::clblast, [](uint64_t v) { return v <= 1; }}, "0 or 1"},
    {"mma", IntField{&Tuning::mma, [](uint64_t v) { return v <= 1; }}, "0 or 1"},
    {"mma_bk", IntField{&Tuning::mma_bk, [](uint64_t v) { return one_of(v, {32, 64}); }}, "32 or 64"},
    {"mma_bm", IntField{&Tuning::mma_bm, [](uint64_t v) { return one_of(v, {64, 128}); }}, "64 or 128"},
    {"att_wg", IntField{&Tuning::att_wg, [](uint64_t v) { return one_of(v, {64, 128, 256}); }}, "64, 128 or 256"},
    {"att_wg_fused", IntField{&Tuning::att_wg_fused, [](uint64_t v) { return one_of(v, {0, 64, 128, 256}); }},
     "0, 64, 128 or 256"},
    {"att_query_parts", IntField{&Tuning::att_query_parts, [](uint64_t v) { return v <= 16; }}, "0 to 16"},
    {"att_team", IntField{&Tuning::att_team, [](uint64_t v) { return one_of(v, {0, 8, 16, 32}); }}, "0 (the kernel's), 8, 16 or 32"},
    {"att_kpt", IntField{&Tuning::att_kpt, [](uint64_t v) { return one_of(v, {0, 1, 2, 4, 8}); }},
     "0 (the kernel's), 1, 2, 4 or 8"},
    {"att_vu", IntField{&Tuning::att_vu, [](uint64_t v) { return v <= 64; }}, "0 (the kernel's) to 64"},
    {"att_shfl_local", IntField{&Tuning::att_shfl_local, [](uint64_t v) { return v <= 1; }}, "0 or 1"},
    {"att_short", IntField{&Tuning::att_short, [](uint64_t v) { return v <= uint64_t(INT32_MAX); }}, "0 (never) to 2^31 - 1"},
    {"att_groups_per_cu", IntField{&Tuning::att_groups_per_cu, [](uint64_t v) { return v >= 1 && v <= 64; }}, "1 to 64"},
    {"att_groups_per_cu_fused", IntField{&Tuning::att_groups_per_cu_fused, [](uint64_t v) { return v >= 1 && v <= 64; }},
     "1 to 64"},
    {"fused_attention", IntField{&Tuning::fused_attention, [](uint64_t v) { return v <= 1; }}, "0 or 1"},
    {"maxrreg_att", IntField{&Tuning::maxrreg_att, [](uint64_t v) { return v == 0 || (v >= 16 && v <= 255); }},
     "0 (no cap) or 16 to 255"},
    {"mma_att", IntField{&Tuning::mma_att, [](uint64_t v) { return v <= 1; }}, "0 or 1"},
    {"mma_att_min_run", IntField{&Tuning::mma_att_min_run, [](uint64_t v) { return v >= 1 && v <= 65536; }}, "1 to 65536"},
    {"mma_att_groups_per_cu", IntField{&Tuning::mma_att_groups_per_cu, [](uint64_t v) { return v >= 1 && v <= 64; }},
     "1 to 64"},
    {"mma_att_min_tiles", IntField{&Tuning::mma_att_min_tiles, [](uint64_t v) { return v >= 1 && v <= 64; }}, "1 to 64"},
    {"mma_att_splits", IntField{&Tuning::mma_att_splits, [](uint64_t v) { return v <= 64; }}, "0 (not forced) to 64"},
    {"mma_att_queries", IntField{&Tuning::mma_att_queries, [](uint64_t v) { return v == 64 || v == 128; }}, "64 or 128"},
    {"max_alloc", IntField{&Tuning::max_alloc, [](uint64_t v) { return v <= (uint64_t(1) << 62); }},
     "0 (the device's limit) to 2^62 bytes"},
};

const Field* find_field(std::string_view name, std::size_t* index = nullptr) {
  for (std::size_t i = 0; i < std::size(kFields); ++i)
    if (name == kFields[i].name) {
      if (index) *index = i;
      return &kFields[i];
    }
  return nullptr;
}

// A whole unsigned decimal number (no sign, no spaces), or false.
bool parse_uint(std::string_view s, uint64_t& out) {
  if (s.empty() || s.size() > 20) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// "AxB" as two numbers that fit 32 bits.
bool parse_pair(std::string_view s, uint32_t& a, uint32_t& b) {
  const auto x = s.find('x');
  uint64_t u = 0, v = 0;
  if (x == std::string_view::npos || !parse_uint(s.substr(0, x), u) || !parse_uint(s.substr(x + 1), v)) return false;
  if (u > UINT32_MAX || v > UINT32_MAX) return false;
  a = static_cast<uint32_t>(u);
  b = static_cast<uint32_t>(v);
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

Status bad_value(const Field& f, std::string_view value) {
  return make_error(std::string(f.name) + " = '" + std::string(value) + "': expected " + f.accepted);
}

Status set_field(Tuning& t, const Field& f, std::string_view value) {
  if (const auto* i = std::get_if<IntField>(&f.kind)) {
    uint64_t v = 0;
    if (!parse_uint(value, v) || !i->ok(v)) return bad_value(f, value);
    if (const auto* m32 = std::get_if<uint32_t Tuning::*>(&i->member)) {
      t.*(*m32) = static_cast<uint32_t>(v);  // every 32-bit field's range is below 2^32
    } else {
      t.*std::get<uint64_t Tuning::*>(i->member) = v;
    }
    return {};
  }
  if (const auto* s = std::get_if<ShapeField>(&f.kind)) {
    TeamShape shape;
    if (!parse_pair(value, shape.team, shape.rows) || !s->ok(shape)) return bad_value(f, value);
    t.*(s->member) = shape;
    return {};
  }
  const auto& list = std::get<ShapeListField>(f.kind);
  std::vector<ShapeChoice> choices;
  std::string_view rest = value;
  while (!rest.empty()) {
    const auto end = rest.find(';');
    const std::string_view item = trim(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    ShapeChoice c;
    if (eq == std::string_view::npos || !parse_pair(item.substr(0, eq), c.rows, c.cols) || c.rows == 0 || c.cols == 0 ||
        !parse_pair(item.substr(eq + 1), c.shape.team, c.shape.rows) || !q4_shape_ok(c.shape))
      return bad_value(f, value);
    if (choices.size() == kTuningMaxShapes)
      return make_error(std::string(f.name) + ": more than " + std::to_string(kTuningMaxShapes) + " shapes");
    choices.push_back(c);
  }
  t.*(list.member) = std::move(choices);
  return {};
}

// `"..."` at the front of s (no escapes: a pattern has no quote), consumed.
bool take_quoted(std::string_view& s, std::string& out) {
  s = trim(s);
  if (s.empty() || s.front() != '"') return false;
  const auto end = s.find('"', 1);
  if (end == std::string_view::npos) return false;
  out = std::string(s.substr(1, end - 1));
  s.remove_prefix(end + 1);
  return true;
}

bool take_word(std::string_view& s, std::string_view word) {
  s = trim(s);
  if (s.substr(0, word.size()) != word) return false;
  s.remove_prefix(word.size());
  return s.empty() || s.front() == ' ' || s.front() == '\t' || s.front() == '"';
}

// `vendor "GLOB" device "GLOB" ["GLOB" ...]`, the inside of a section header.
bool parse_header(std::string_view inside, TuningSection& out) {
  if (!take_word(inside, "vendor") || !take_quoted(inside, out.vendor) || !take_word(inside, "device")) return false;
  std::string pattern;
  while (take_quoted(inside, pattern)) out.devices.push_back(pattern);
  return !out.devices.empty() && trim(inside).empty();
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

std::vector<std::string> tuning_field_names() {
  std::vector<std::string> names;
  for (const auto& f : kFields) names.emplace_back(f.name);
  return names;
}

Status set_tuning_field(Tuning& t, std::string_view key, std::string_view value) {
  const Field* f = find_field(key);
  if (!f) return make_error("unknown tuning key '" + std::string(key) + "'");
  return set_field(t, *f, value);
}

bool glob_match(std::string_view pattern, std::string_view text) {
  // Iterative, with one backtrack point (the last '*'): linear in practice, never recursive.
  std::size_t p = 0, t = 0, star = std::string_view::npos, resume = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || lower(pattern[p]) == lower(text[t]))) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool section_matches(const TuningSection& s, const DeviceId& d) {
  if (!glob_match(s.vendor, d.vendor)) return false;
  return std::any_of(s.devices.begin(), s.devices.end(), [&](const std::string& p) { return glob_match(p, d.name); });
}

Result<TuningText> parse_tuning_text(std::string_view text, const std::string& what) {
  if (text.size() > kTuningMaxBytes)
    return make_error(what + ": " + std::to_string(text.size()) + " bytes, more than the " + std::to_string(kTuningMaxBytes) +
                      " a tuning text may have");
  TuningText out;
  std::size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    const std::string where = what + " line " + std::to_string(line_no);
    if (line.size() > kTuningMaxLine)
      return make_error(where + ": longer than " + std::to_string(kTuningMaxLine) + " characters");
    if (line.find('\0') != std::string_view::npos) return make_error(where + ": a NUL byte");
    if (const auto hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    if (line.front() == '[') {
      TuningSection s;
      if (line.back() != ']' || !parse_header(line.substr(1, line.size() - 2), s))
        return make_error(where + ": expected a section header [vendor \"GLOB\" device \"GLOB\" ...], not '" + std::string(line) + "'");
      if (out.sections.size() == kTuningMaxSections)
        return make_error(where + ": more than " + std::to_string(kTuningMaxSections) + " sections");
      s.header = std::string(line);
      out.sections.push_back(std::move(s));
      continue;
    }
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) return make_error(where + ": expected 'key = value', not '" + std::string(line) + "'");
    const std::string_view key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    std::size_t index = 0;
    const Field* f = find_field(key, &index);
    if (!f) return make_error(where + ": unknown tuning key '" + std::string(key) + "'");
    Tuning scratch;
    if (auto s = set_field(scratch, *f, value); !s) return make_error(where + ": " + s.message());
    auto& settings = out.sections.empty() ? out.global : out.sections.back().settings;
    for (const auto& earlier : settings)
      if (earlier.field == index) return make_error(where + ": " + f->name + " is set twice (first at " + earlier.where + ")");
    settings.push_back(TuningSetting{index, std::string(value), where});
  }
  return out;
}

Result<TuningText> read_tuning_file(const std::string& path) {
  const std::string what = "tuning file " + path;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return make_error(what + ": not a readable file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) return make_error(what + ": " + ec.message());
  if (size > kTuningMaxBytes)
    return make_error(what + ": " + std::to_string(size) + " bytes, more than the " + std::to_string(kTuningMaxBytes) +
                      " a tuning file may have");
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(what + ": cannot be opened");
  std::string text(static_cast<std::size_t>(size), '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  if (static_cast<std::size_t>(in.gcount()) != size) return make_error(what + ": read failed");
  return parse_tuning_text(text, what);
}

Result<BackendOptions> parse_backend_options(std::string_view text) {
  static constexpr std::string_view kFlags[] = {"portable",    "host-kv",     "generic-attention", "no-attention-join", "no-res-join",
                                                "no-glu-join", "no-rope-join", "glu-whole-block"};
  if (text.size() > kTuningMaxLine * 4) return make_error("backend options longer than " + std::to_string(kTuningMaxLine * 4) + " characters");
  BackendOptions out;
  std::size_t at = 0;
  while (at < text.size()) {
    const auto end = text.find_first_of(" ,\t\n", at);
    const std::string_view token = text.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    at = end == std::string_view::npos ? text.size() : end + 1;
    if (token.empty()) continue;
    if (std::find(std::begin(kFlags), std::end(kFlags), token) != std::end(kFlags)) {
      out.flags.emplace_back(token);
    } else if (token.substr(0, 7) == "tuning=") {
      if (!out.tuning_file.empty()) return make_error("backend option tuning= given twice");
      out.tuning_file = std::string(token.substr(7));
      if (out.tuning_file.empty()) return make_error("backend option tuning= names no file");
    } else if (token.substr(0, 5) == "tune.") {
      const auto eq = token.find('=');
      if (eq == std::string_view::npos) return make_error("backend option '" + std::string(token) + "': expected tune.KEY=VALUE");
      const std::string_view key = token.substr(5, eq - 5), value = token.substr(eq + 1);
      const Field* f = find_field(key);
      if (!f) return make_error("backend option '" + std::string(token) + "': unknown tuning key '" + std::string(key) + "'");
      Tuning scratch;
      if (auto s = set_field(scratch, *f, value); !s) return make_error("backend option tune." + s.message());
      out.settings.emplace_back(std::string(key), std::string(value));
    } else {
      std::string known;
      for (auto f : kFlags) known += std::string(known.empty() ? "" : ", ") + std::string(f);
      return make_error("unknown backend option '" + std::string(token) + "' (known: " + known +
                        ", tuning=FILE, tune.KEY=VALUE)");
    }
  }
  return out;
}

Result<ResolvedTuning> resolve_tuning(const DeviceId& device, std::string_view table, const BackendOptions& options) {
  ResolvedTuning out;
  auto apply = [&](const std::vector<TuningSetting>& settings) -> Status {
    for (const auto& s : settings)
      if (auto r = set_field(out.tuning, kFields[s.field], s.value); !r) return make_error(s.where + ": " + r.message());
    return {};
  };
  auto apply_text = [&](const TuningText& text, const std::string& what) -> Status {
    if (!text.global.empty()) {
      if (auto s = apply(text.global); !s) return s;
      out.applied.push_back(what + " (every device)");
    }
    for (const auto& section : text.sections) {
      if (!section_matches(section, device)) continue;
      if (auto s = apply(section.settings); !s) return s;
      out.applied.push_back(what + " " + section.header);
    }
    return {};
  };
  auto builtin = parse_tuning_text(table, "built-in tuning table");
  if (!builtin) return builtin.error();
  if (auto s = apply_text(*builtin, "built-in"); !s) return s.error();
  if (!options.tuning_file.empty()) {
    auto file = read_tuning_file(options.tuning_file);
    if (!file) return file.error();
    if (auto s = apply_text(*file, options.tuning_file); !s) return s.error();
  }
  for (const auto& [key, value] : options.settings) {
    if (auto s = set_tuning_field(out.tuning, key, value); !s) return make_error("backend option tune." + s.message());
    out.applied.push_back("tune." + key + "=" + value);
  }
  return out;
}

}  // namespace sluice::ocl
