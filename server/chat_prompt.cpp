#include "server/chat_prompt.h"

#if __has_include("chat/template.h")
#include "chat/template.h"
#define SLUICE_HAVE_CHAT_TEMPLATES 1
#else
// The Jinja engine (core/chat) has not landed in this tree yet: chat requests answer 400 until it does.
namespace sluice::chat {
class Template {};
}  // namespace sluice::chat
#endif
#include "util/json.h"

namespace sluice::server {
namespace {

// tokenizer_config.json spells special tokens as a string or as {"content": "..."}.
std::string token_text(const rapidjson::Value& config, const char* name) {
  const auto* v = json::member(config, name);
  if (!v) return {};
  if (v->IsString()) return {v->GetString(), v->GetStringLength()};
  if (v->IsObject()) return json::string(*v, "content").value_or("");
  return {};
}

}  // namespace

ChatPrompt::ChatPrompt(ChatPrompt&&) noexcept = default;
ChatPrompt& ChatPrompt::operator=(ChatPrompt&&) noexcept = default;
ChatPrompt::~ChatPrompt() = default;

Result<ChatPrompt> ChatPrompt::load(const std::filesystem::path& model_dir, bool enable_thinking) {
  ChatPrompt prompt;
  prompt.enable_thinking_ = enable_thinking;
  if (auto config = json::parse_file(model_dir / "tokenizer_config.json")) {
    prompt.bos_token_ = token_text(*config, "bos_token");
    prompt.eos_token_ = token_text(*config, "eos_token");
  }
#ifndef SLUICE_HAVE_CHAT_TEMPLATES
  prompt.unavailable_reason_ = "chat templates are not available in this build; use /v1/completions";
  return prompt;
#else
  auto source = chat::load_chat_template_source(model_dir);
  if (!source) {
    prompt.unavailable_reason_ = "this model has no chat template: " + source.message() + "; use /v1/completions";
    return prompt;
  }
  prompt.tool_format_ = toolcall::detect_format(*source);
  auto parsed = chat::Template::parse(*source);
  if (!parsed) return make_error("the model's chat template does not parse: " + parsed.message());
  prompt.template_ = std::make_unique<chat::Template>(std::move(*parsed));
  return prompt;
#endif
}

Result<std::string> ChatPrompt::render(const rapidjson::Value& messages, const rapidjson::Value* tools,
                                       bool add_generation_prompt) const {
  if (!template_) return make_error(unavailable_reason_);
  rapidjson::Document vars(rapidjson::kObjectType);
  auto& a = vars.GetAllocator();
  vars.AddMember("messages", rapidjson::Value(messages, a), a);
  if (tools && tools->IsArray()) vars.AddMember("tools", rapidjson::Value(*tools, a), a);
  vars.AddMember("add_generation_prompt", add_generation_prompt, a);
  vars.AddMember("bos_token", rapidjson::Value(bos_token_.c_str(), a), a);
  vars.AddMember("eos_token", rapidjson::Value(eos_token_.c_str(), a), a);
  if (enable_thinking_) vars.AddMember("enable_thinking", true, a);
#ifdef SLUICE_HAVE_CHAT_TEMPLATES
  return template_->render(vars);
#else
  return make_error(unavailable_reason_);
#endif
}

}  // namespace sluice::server
