#pragma once
// How one chat template wants an agent's history spelled. OpenAI clients send tool-call arguments as
// a JSON string and an assistant turn that only calls tools with `content: null`; templates were
// written for transformers, where most iterate or `tojson` the arguments as an object (vLLM and
// llama.cpp parse them for that reason), a few concatenate them as a string, some test `content is
// none` to decide whether to print the calls and others fail on a null. Which spelling a template
// takes is found once, by rendering a probe conversation each way (llama.cpp's minja does the same),
// and applied to every request's messages.
#include <string>

#include <rapidjson/document.h>

namespace sluice::chat {
class Template;
}

namespace sluice::server {

struct ChatHistoryForm {
  bool arguments_as_object = true;  // function.arguments parsed from its JSON string
  bool null_content = false;        // an assistant's null content stays null (false: becomes "")
  bool renders_tool_calls = false;  // some spelling put the probe call into the prompt
  std::string probe_failure;        // when none did: what the last try said (for logs and tests)
};

ChatHistoryForm probe_chat_history_form(const chat::Template& tmpl, const std::string& bos_token,
                                        const std::string& eos_token);

// A copy of normalised `messages` (chat_messages.h) spelled the way `form` says.
rapidjson::Document apply_chat_history_form(const rapidjson::Value& messages, const ChatHistoryForm& form);

}  // namespace sluice::server
