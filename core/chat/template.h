#pragma once
// Chat templates: a Jinja2 engine that renders the way HF transformers' apply_chat_template does
// (Jinja2 3.1 ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, transformers'
// tojson / raise_exception / strftime_now). See docs/ARCHITECTURE-chat.md for the supported subset.
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <rapidjson/document.h>

#include "chat/budget.h"
#include "util/result.h"

namespace sluice::chat {

struct Stmt;

class Template {
 public:
  // Parses once; syntax errors (and unknown filters/tests outside `if`) are reported here.
  static Result<Template> parse(std::string_view source);

  // variables: a JSON object (messages, tools, add_generation_prompt, bos_token, eos_token, kwargs).
  // Runtime failures (raise_exception, undefined values used wrongly, an exhausted RenderBudget)
  // come back as errors.
  Result<std::string> render(const rapidjson::Value& variables) const;
  Result<std::string> render(const rapidjson::Value& variables, std::chrono::system_clock::time_point now) const;
  Result<std::string> render(const rapidjson::Value& variables, std::chrono::system_clock::time_point now,
                             const RenderOptions& options) const;

 private:
  std::shared_ptr<const std::vector<std::unique_ptr<Stmt>>> body_;
};

// Reads a model folder's template: chat_template.jinja, else tokenizer_config.json `chat_template`
// (a string, or a list of {name, template} from which the "default" one is taken).
Result<std::string> load_chat_template_source(const std::filesystem::path& model_dir);

}  // namespace sluice::chat
