// Fuzzes what an HTTP body goes through before the engine sees it: parse_chat_request and
// parse_completion_request on the same bytes, then, for a chat request that passed, the chat prompt
// rendered with a tool-aware template (Qwen2.5's) as the server does. Checks: errors are well-formed
// 4xx objects (valid UTF-8 JSON once repaired as the server repairs every response), accepted requests
// hold only values inside the documented ranges.
#include <cmath>

#include "fuzz_support.h"
#include "server/chat_prompt.h"
#include "server/request_parser.h"
#include "server/utf8_output.h"
#include "util/json.h"

namespace {

using namespace sluice;
using namespace sluice::server;

constexpr int kDefaultMaxTokens = 512;

const ChatPrompt& chat_prompt() {
  static const ChatPrompt prompt = [] {
    const auto dir = fuzz::scratch_dir() / "model";
    std::filesystem::create_directories(dir);
    fuzz::write_file(dir / "chat_template.jinja", fuzz::read_reference("chat_templates/Qwen-Qwen2.5-7B-Instruct.jinja"));
    fuzz::write_file(dir / "tokenizer_config.json", fuzz::read_reference("models/tiny-code-qwen2/tokenizer_config.json"));
    auto loaded = ChatPrompt::load(dir, /*default_thinking=*/std::nullopt);
    FUZZ_CHECK(loaded && loaded->available(), "chat prompt did not load");
    return std::move(*loaded);
  }();
  return prompt;
}

void check_error(const ApiError& e) {
  FUZZ_CHECK(e.status >= 400 && e.status < 500, "status %d", e.status);
  FUZZ_CHECK(!e.message.empty());
  // As the server sends it: repaired to valid UTF-8 (whatever bytes the request carried), still JSON.
  std::string body = e.to_json();
  make_valid_utf8(body);
  FUZZ_CHECK(fuzz::valid_utf8(body), "error body is not valid UTF-8: %s", body.c_str());
  auto parsed = json::parse(body, "error body");
  FUZZ_CHECK(parsed && parsed->IsObject() && parsed->HasMember("error"), "%s", body.c_str());
}

void check_params(const CompletionParams& p) {
  FUZZ_CHECK(p.max_tokens >= 1 && p.max_tokens <= kDefaultMaxTokens, "max_tokens %d", p.max_tokens);
  const auto& s = p.sampling;
  FUZZ_CHECK(s.temperature >= 0 && s.temperature <= 2);
  // A top_p below float's range (8e-69) narrows to 0; the sampler then keeps the one best token, as
  // it does for the 1e-6 an explicit 0 becomes, so 0 is tolerated here.
  FUZZ_CHECK(s.top_p >= 0 && s.top_p <= 1);
  FUZZ_CHECK(s.top_k >= 0);
  FUZZ_CHECK(s.min_p >= 0 && s.min_p <= 1);
  FUZZ_CHECK(std::isfinite(s.presence_penalty) && std::isfinite(s.frequency_penalty));
  FUZZ_CHECK(s.repeat_penalty > 0 && std::isfinite(s.repeat_penalty));
  FUZZ_CHECK(p.stop.size() <= 16);
  for (const auto& stop : p.stop) FUZZ_CHECK(!stop.empty());
  FUZZ_CHECK(p.top_logprobs >= 0 && p.top_logprobs <= 20);
  FUZZ_CHECK(!p.timeout_s || (*p.timeout_s > 0 && std::isfinite(*p.timeout_s)));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  RequestDefaults defaults;
  defaults.max_tokens = kDefaultMaxTokens;

  auto chat = parse_chat_request(body, defaults);
  if (!chat) {
    check_error(chat.error());
  } else {
    check_params(chat->params);
    FUZZ_CHECK(chat->messages.IsArray() && !chat->messages.Empty());
    // The normalised form chat_messages.h promises: content a string, or null on an assistant turn;
    // tool calls a non-empty array with a named function and string arguments; a tool's call id.
    for (const auto& m : chat->messages.GetArray()) {
      auto role = m.IsObject() ? json::string(m, "role") : std::nullopt;
      FUZZ_CHECK(role.has_value());
      const auto content = m.FindMember("content");  // json::member would hide a null
      FUZZ_CHECK(content != m.MemberEnd() &&
                 (content->value.IsString() || (content->value.IsNull() && *role == "assistant")));
      if (const auto* calls = json::member(m, "tool_calls")) {
        FUZZ_CHECK(*role == "assistant" && calls->IsArray() && !calls->Empty());
        for (const auto& call : calls->GetArray()) {
          const auto* function = json::member(call, "function");
          FUZZ_CHECK(function && function->IsObject());
          FUZZ_CHECK(json::string(*function, "name").value_or("") != "");
          FUZZ_CHECK(json::string(*function, "arguments").has_value());
        }
      }
      if (*role == "tool") FUZZ_CHECK(json::string(m, "tool_call_id").has_value());
    }
    FUZZ_CHECK(chat->template_controls.kwargs.IsObject() &&
               chat->template_controls.kwargs.MemberCount() <= kMaxTemplateKwargs);
    FUZZ_CHECK(chat->tools.IsNull() || chat->tools.IsArray());
    const auto* tools = chat->tools.IsArray() ? &chat->tools : nullptr;
    // Template errors (raise_exception on an odd conversation) are fine; a crash or hang is not.
    (void)chat_prompt().render(chat->messages, tools, chat->add_generation_prompt.value_or(true),
                               &chat->template_controls);
  }

  auto completion = parse_completion_request(body, defaults);
  if (!completion) {
    check_error(completion.error());
  } else {
    check_params(completion->params);
    FUZZ_CHECK(completion->prompt_text.has_value() != !completion->prompt_ids.empty());
  }
  return 0;
}
