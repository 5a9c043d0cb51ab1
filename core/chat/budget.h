#pragma once
// What one render may spend. Templates come from model folders and their variables from requests, so
// every render runs under a budget; running out of any part is a template error, never a crash or a
// stall. The defaults are far above what real chat templates use (the goldens take at most 576 steps
// and depth 28) and far below what hurts a server.
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace sluice::chat {

struct RenderBudget {
  // Expression evaluations, statements, loop iterations and items materialized (a list copied, a
  // string split into characters). 10M steps are 1-3 s of work; the largest golden takes 576.
  std::uint64_t max_steps = 10'000'000;
  // Nesting of evaluation: each expression node, statement and call being evaluated is one level, so
  // a simple recursive macro costs ~4 levels per call (1000 levels: ~245 calls deep; Jinja2 itself
  // stops near 190). Bounds the native stack: ~430 bytes a level in a release build.
  int max_depth = 1000;
  // The rendering, and any single string or list the template builds on the way.
  std::size_t max_output_bytes = 8u << 20;
  // String bytes that the render's values hold at once (strings are copied, not shared), the
  // converted variables included. A conversation filling the output budget holds a few times it.
  std::size_t max_held_bytes = 256u << 20;
  std::chrono::milliseconds max_wall_time{2000};
};

struct RenderOptions {
  // transformers renders with ImmutableSandboxedEnvironment: list.append, dict.update, ... are
  // refused as unsafe. Set true to behave like the plain SandboxedEnvironment instead.
  bool allow_mutation = false;
  RenderBudget budget;
};

// Limits of the parser and of walks over nested values, fixed because they guard the native stack.
inline constexpr int kMaxParseNesting = 200;       // nested brackets, `not`, tags inside tags, ...
inline constexpr int kMaxExpressionHeight = 500;   // operator chains: a + b + ..., x.a.b..., x|f|g...
inline constexpr int kMaxValueDepth = 500;         // lists/dicts inside each other: JSON in, repr, tojson, ==

}  // namespace sluice::chat
