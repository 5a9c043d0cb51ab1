#pragma once
// Renders an OpenAI `messages` array into the prompt text with the model's own chat template
// (bos_token / eos_token from tokenizer_config.json, add_generation_prompt true by default), with the
// agent history spelled the way the template wants it (chat_history_form.h) and the request's
// template controls (template_controls.h) as variables.
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <rapidjson/document.h>

#include "server/chat_history_form.h"
#include "server/template_controls.h"
#include "toolcall/tool_call.h"
#include "util/result.h"

namespace sluice::chat {
class Template;
}

namespace sluice::server {

class ChatPrompt {
 public:
  // No template in the model folder is not an error: chat requests then answer 400.
  // default_thinking: enable_thinking when a request does not say (nullopt: the template's own default).
  static Result<ChatPrompt> load(const std::filesystem::path& model_dir, std::optional<bool> default_thinking);
  // A template given as text (tests, tools): the same probing and rendering as a model folder's.
  static Result<ChatPrompt> from_source(const std::string& source, std::string bos_token, std::string eos_token,
                                        std::optional<bool> default_thinking);
  ChatPrompt(ChatPrompt&&) noexcept;
  ChatPrompt& operator=(ChatPrompt&&) noexcept;
  ~ChatPrompt();

  bool available() const { return template_ != nullptr; }
  // The tool-call syntax the template teaches (kNone: answers are not parsed for calls).
  toolcall::Format tool_format() const { return tool_format_; }
  const std::string& unavailable_reason() const { return unavailable_reason_; }
  const ChatHistoryForm& history_form() const { return history_form_; }
  // The template writes `<think>` (Qwen3, DeepSeek-R1, QwQ, ...): answers may open with reasoning.
  bool uses_think_tags() const { return uses_think_tags_; }

  // tools may be null; controls may be null (no request controls: only the server default applies).
  // Template errors (raise_exception, ...) come back as messages.
  Result<std::string> render(const rapidjson::Value& messages, const rapidjson::Value* tools, bool add_generation_prompt,
                             const TemplateControls* controls = nullptr) const;

  // strftime_now answers this time instead of the clock's (reproducible renders: tests, goldens).
  void fix_clock(std::chrono::system_clock::time_point now) { fixed_now_ = now; }

 private:
  ChatPrompt() = default;
  Status adopt_source(const std::string& source);

  std::unique_ptr<chat::Template> template_;
  std::string unavailable_reason_;
  std::string bos_token_;
  std::string eos_token_;
  std::optional<bool> default_thinking_;
  ChatHistoryForm history_form_;
  bool uses_think_tags_ = false;
  std::optional<std::chrono::system_clock::time_point> fixed_now_;
  toolcall::Format tool_format_ = toolcall::Format::kNone;
};

}  // namespace sluice::server
