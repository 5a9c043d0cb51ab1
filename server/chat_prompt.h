#pragma once
// Renders an OpenAI `messages` array into the prompt text with the model's own chat template
// (bos_token / eos_token from tokenizer_config.json, add_generation_prompt true by default).
#include <filesystem>
#include <memory>
#include <string>

#include <rapidjson/document.h>

#include "toolcall/tool_call.h"
#include "util/result.h"

namespace sluice::chat {
class Template;
}

namespace sluice::server {

class ChatPrompt {
 public:
  // No template in the model folder is not an error: chat requests then answer 400.
  static Result<ChatPrompt> load(const std::filesystem::path& model_dir, bool enable_thinking);
  ChatPrompt(ChatPrompt&&) noexcept;
  ChatPrompt& operator=(ChatPrompt&&) noexcept;
  ~ChatPrompt();

  bool available() const { return template_ != nullptr; }
  // The tool-call syntax the template teaches (kNone: answers are not parsed for calls).
  toolcall::Format tool_format() const { return tool_format_; }
  const std::string& unavailable_reason() const { return unavailable_reason_; }

  // tools may be null. Template errors (raise_exception, ...) come back as messages.
  Result<std::string> render(const rapidjson::Value& messages, const rapidjson::Value* tools,
                             bool add_generation_prompt) const;

 private:
  ChatPrompt() = default;
  std::unique_ptr<chat::Template> template_;
  std::string unavailable_reason_;
  std::string bos_token_;
  std::string eos_token_;
  bool enable_thinking_ = false;
  toolcall::Format tool_format_ = toolcall::Format::kNone;
};

}  // namespace sluice::server
