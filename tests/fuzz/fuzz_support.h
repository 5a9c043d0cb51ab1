#pragma once
// Shared by the libFuzzer harnesses: where the reference data is, a scratch folder for parsers that
// read files, a UTF-8 check, and FUZZ_CHECK — a broken invariant aborts, so libFuzzer keeps the input.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <utility>

namespace sluice::fuzz {

#define FUZZ_CHECK(cond, ...)                                                          \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, "" __VA_ARGS__);                                            \
      std::fputc('\n', stderr);                                                        \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

// The models and goldens (../shared by default); SLUICE_REFERENCE_DIR in the environment overrides.
inline std::filesystem::path reference_dir() {
  if (const char* env = std::getenv("SLUICE_REFERENCE_DIR"); env && *env) return env;
  return SLUICE_REFERENCE_DIR;
}

// A reference file the harness cannot do without: missing → a message and exit, not a finding.
inline std::string read_reference(const std::filesystem::path& relative) {
  const auto path = reference_dir() / relative;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "fuzz: cannot read %s (set SLUICE_REFERENCE_DIR)\n", path.c_str());
    std::exit(2);
  }
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A private folder for the process's life (parsers that take a path get their input written here);
// in memory (/dev/shm) unless TMPDIR says otherwise, since every execution rewrites it.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::error_code ec;
    const bool shm = !std::getenv("TMPDIR") && std::filesystem::is_directory("/dev/shm", ec);
    const auto base = shm ? std::filesystem::path("/dev/shm") : std::filesystem::temp_directory_path();
    std::string tmpl = (base / "sluice-fuzz-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) std::abort();
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch_dir(), ec); });
    return std::filesystem::path(tmpl);
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) std::abort();
}

// Well-formed UTF-8: no stray continuation bytes, overlongs, surrogates or code points past U+10FFFF.
inline bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// Splits at the first NUL byte: harnesses taking two inputs (template + variables, config + generation
// config) read them from one fuzz input this way; JSON and templates never need a raw NUL.
inline std::pair<std::string_view, std::string_view> split_at_nul(std::string_view input, bool* found = nullptr) {
  const auto nul = input.find('\0');
  if (found) *found = nul != std::string_view::npos;
  if (nul == std::string_view::npos) return {input, {}};
  return {input.substr(0, nul), input.substr(nul + 1)};
}

}  // namespace sluice::fuzz
