#include "server/chat_prompt.h"

#include "chat/template.h"
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

Status ChatPrompt::adopt_source(const std::string& source) {
  auto parsed = chat::Template::parse(source);
  if (!parsed) return make_error("the model's chat template does not parse: " + parsed.message());
  template_ = std::make_unique<chat::Template>(std::move(*parsed));
  history_form_ = probe_chat_history_form(*template_, bos_token_, eos_token_);
  uses_think_tags_ = source.find("<think>") != std::string::npos;
  tool_format_ = toolcall::detect_format(source);
  return {};
}

Result<ChatPrompt> ChatPrompt::load(const std::filesystem::path& model_dir, std::optional<bool> default_thinking) {
  ChatPrompt prompt;
  prompt.default_thinking_ = default_thinking;
  if (auto config = json::parse_file(model_dir / "tokenizer_config.json")) {
    prompt.bos_token_ = token_text(*config, "bos_token");
    prompt.eos_token_ = token_text(*config, "eos_token");
  }
  auto source = chat::load_chat_template_source(model_dir);
  if (!source) {
    prompt.unavailable_reason_ = "this model has no chat template: " + source.message() + "; use /v1/completions";
    return prompt;
  }
  if (auto adopted = prompt.adopt_source(*source); !adopted) return adopted.error();
  return prompt;
}

Result<ChatPrompt> ChatPrompt::from_source(const std::string& source, std::string bos_token, std::string eos_token,
                                           std::optional<bool> default_thinking) {
  ChatPrompt prompt;
  prompt.default_thinking_ = default_thinking;
  prompt.bos_token_ = std::move(bos_token);
  prompt.eos_token_ = std::move(eos_token);
  if (auto adopted = prompt.adopt_source(source); !adopted) return adopted.error();
  return prompt;
}

Result<std::string> ChatPrompt::render(const rapidjson::Value& messages, const rapidjson::Value* tools,
                                       bool add_generation_prompt, const TemplateControls* controls) const {
  if (!template_) return make_error(unavailable_reason_);
  rapidjson::Document vars(rapidjson::kObjectType);
  auto& a = vars.GetAllocator();
  // chat_template_kwargs first: their names were checked against the variables set below.
  if (controls) {
    for (auto it = controls->kwargs.MemberBegin(); it != controls->kwargs.MemberEnd(); ++it)
      vars.AddMember(rapidjson::Value(it->name, a), rapidjson::Value(it->value, a), a);
  }
  rapidjson::Document spelled = apply_chat_history_form(messages, history_form_);
  vars.AddMember("messages", rapidjson::Value(spelled, a), a);
  if (tools && tools->IsArray()) vars.AddMember("tools", rapidjson::Value(*tools, a), a);
  vars.AddMember("add_generation_prompt", add_generation_prompt, a);
  vars.AddMember("bos_token", rapidjson::Value(bos_token_.c_str(), a), a);
  vars.AddMember("eos_token", rapidjson::Value(eos_token_.c_str(), a), a);
  // Absent unless someone says: templates test `enable_thinking is defined` / `is false`.
  const std::optional<bool> thinking = controls && controls->enable_thinking ? controls->enable_thinking : default_thinking_;
  if (thinking) vars.AddMember("enable_thinking", *thinking, a);
  if (controls && controls->reasoning_effort) {
    if (vars.HasMember("reasoning_effort")) vars.RemoveMember("reasoning_effort");
    vars.AddMember("reasoning_effort", rapidjson::Value(controls->reasoning_effort->c_str(), a), a);
  }
  return template_->render(vars, fixed_now_.value_or(std::chrono::system_clock::now()));
}

}  // namespace sluice::server
