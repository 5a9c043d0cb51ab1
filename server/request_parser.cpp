#include "server/request_parser.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>

#include "engine/engine.h"

#include "util/json.h"

namespace sluice::server {
namespace {

using rapidjson::Value;

// Field readers: absent or null → nullopt; present with the wrong type or range → error.
struct Fields {
  const Value& obj;
  std::optional<ApiError> error;

  const Value* get(const char* name) { return json::member(obj, name); }

  std::optional<double> number(const char* name, double lo, double hi) {
    const Value* v = get(name);
    if (!v || error) return std::nullopt;
    if (!v->IsNumber()) return fail(name, std::string(name) + " must be a number");
    double x = v->GetDouble();
    if (!std::isfinite(x) || x < lo || x > hi)
      return fail(name, std::string(name) + " must be between " + fmt(lo) + " and " + fmt(hi));
    return x;
  }
  std::optional<long long> integer(const char* name, long long lo, long long hi) {
    const Value* v = get(name);
    if (!v || error) return std::nullopt;
    if (!v->IsInt64()) return fail(name, std::string(name) + " must be an integer");
    long long x = v->GetInt64();
    if (x < lo || x > hi)
      return fail(name, std::string(name) + " must be between " + std::to_string(lo) + " and " + std::to_string(hi));
    return x;
  }
  std::optional<bool> boolean(const char* name) {
    const Value* v = get(name);
    if (!v || error) return std::nullopt;
    if (!v->IsBool()) return fail(name, std::string(name) + " must be a boolean");
    return v->GetBool();
  }
  std::optional<std::string> string(const char* name) {
    const Value* v = get(name);
    if (!v || error) return std::nullopt;
    if (!v->IsString()) return fail(name, std::string(name) + " must be a string");
    return std::string(v->GetString(), v->GetStringLength());
  }

  std::nullopt_t fail(const char* param, std::string message) {
    if (!error) error = ApiError::bad_request(std::move(message), param);
    return std::nullopt;
  }
  static std::string fmt(double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
};

// logit_bias: {"token id": bias} with ids as decimal strings (as OpenAI's clients send them) and
// biases in [-100, 100]; at most kMaxLogitBias entries. Whether an id is in the vocabulary is the
// handler's check (the parser does not know the model).
void parse_logit_bias(const Value& bias, Fields& f, SamplingParams& sampling) {
  if (!bias.IsObject()) {
    f.fail("logit_bias", "logit_bias must be an object mapping token ids to biases");
    return;
  }
  if (bias.MemberCount() > CompletionParams::kMaxLogitBias) {
    f.fail("logit_bias", "logit_bias may hold at most " + std::to_string(CompletionParams::kMaxLogitBias) + " entries");
    return;
  }
  for (const auto& m : bias.GetObject()) {
    const std::string_view key(m.name.GetString(), m.name.GetStringLength());
    long long id = -1;
    const bool digits = !key.empty() && key.size() <= 10 && std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) id = std::stoll(std::string(key));
    if (!digits || id > INT32_MAX) {
      f.fail("logit_bias", "logit_bias keys must be token ids (non-negative integers), not \"" + std::string(key.substr(0, 32)) + "\"");
      return;
    }
    if (!m.value.IsNumber() || !std::isfinite(m.value.GetDouble()) || m.value.GetDouble() < -100 || m.value.GetDouble() > 100) {
      f.fail("logit_bias", "logit_bias values must be numbers between -100 and 100 (token " + std::string(key) + ")");
      return;
    }
    const auto token = static_cast<int32_t>(id);
    std::erase_if(sampling.logit_bias, [&](const auto& b) { return b.first == token; });  // a repeated key: the last wins
    sampling.logit_bias.emplace_back(token, static_cast<float>(m.value.GetDouble()));
  }
}

// Fields both endpoints read. `chat` selects the chat form of logprobs (bool + top_logprobs).
std::optional<ApiError> parse_common(const Value& body, const RequestDefaults& d, bool chat, CompletionParams& p) {
  Fields f{body, std::nullopt};
  p.model = f.string("model").value_or("");
  p.user = f.string("user").value_or("");
  p.max_tokens = d.max_tokens;
  auto max_completion = f.integer("max_completion_tokens", 1, 1LL << 30);
  auto max_tokens = f.integer("max_tokens", 1, 1LL << 30);
  if (max_completion) p.max_tokens = static_cast<int>(std::min<long long>(*max_completion, d.max_tokens));
  else if (max_tokens) p.max_tokens = static_cast<int>(std::min<long long>(*max_tokens, d.max_tokens));
  p.max_tokens_given = max_completion || max_tokens;

  p.sampling = d.sampling;
  if (auto v = f.number("temperature", 0, 2)) p.sampling.temperature = static_cast<float>(*v);
  if (auto v = f.number("top_p", 0, 1)) p.sampling.top_p = *v > 0 ? static_cast<float>(*v) : 1e-6f;
  if (auto v = f.integer("top_k", 0, 1 << 20)) p.sampling.top_k = static_cast<int>(*v);
  if (auto v = f.number("min_p", 0, 1)) p.sampling.min_p = static_cast<float>(*v);
  if (auto v = f.number("presence_penalty", -2, 2)) p.sampling.presence_penalty = static_cast<float>(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) p.sampling.frequency_penalty = static_cast<float>(*v);
  if (auto v = f.number("repetition_penalty", 1e-3, 100)) p.sampling.repeat_penalty = static_cast<float>(*v);
  else if (auto v2 = f.number("repeat_penalty", 1e-3, 100)) p.sampling.repeat_penalty = static_cast<float>(*v2);
  if (const Value* seed = f.get("seed"); seed && !f.error) {
    if (seed->IsUint64()) p.sampling.seed = seed->GetUint64();
    else if (seed->IsInt64()) p.sampling.seed = static_cast<uint64_t>(seed->GetInt64());
    else f.fail("seed", "seed must be an integer");
  }

  if (const Value* stop = f.get("stop"); stop && !f.error) {
    if (stop->IsString()) {
      if (stop->GetStringLength() > 0) p.stop.emplace_back(stop->GetString(), stop->GetStringLength());
    } else if (stop->IsArray()) {
      if (stop->Size() > 16) f.fail("stop", "stop may hold at most 16 strings");
      for (const auto& s : stop->GetArray()) {
        if (!s.IsString()) {
          f.fail("stop", "stop must be a string or an array of strings");
          break;
        }
        if (s.GetStringLength() > 0) p.stop.emplace_back(s.GetString(), s.GetStringLength());
      }
    } else {
      f.fail("stop", "stop must be a string or an array of strings");
    }
  }

  if (auto n = f.integer("n", 1, GenerationRequest::kMaxChoices)) p.n = static_cast<int>(*n);
  if (const Value* bias = f.get("logit_bias"); bias && !f.error) parse_logit_bias(*bias, f, p.sampling);
  if (auto best_of = f.integer("best_of", -(1LL << 30), 1LL << 30); best_of && *best_of != 1)
    f.fail("best_of", "only best_of = 1 is supported");
  p.stream = f.boolean("stream").value_or(false);
  if (const Value* so = f.get("stream_options"); so && !f.error) {
    if (!so->IsObject()) f.fail("stream_options", "stream_options must be an object");
    else {
      Fields sf{*so, std::nullopt};
      p.include_usage = sf.boolean("include_usage").value_or(false);
      if (sf.error) f.fail("stream_options", "stream_options.include_usage must be a boolean");
    }
  }

  if (chat) {
    p.logprobs = f.boolean("logprobs").value_or(false);
    p.top_logprobs = static_cast<int>(f.integer("top_logprobs", 0, 20).value_or(0));
    if (p.top_logprobs > 0 && !p.logprobs && !f.error) f.fail("top_logprobs", "top_logprobs requires logprobs: true");
  } else if (auto lp = f.integer("logprobs", 0, 20)) {
    p.logprobs = true;
    p.top_logprobs = static_cast<int>(*lp);
  }

  if (const Value* rf = f.get("response_format"); rf && !f.error) {
    auto type = rf->IsObject() ? json::string(*rf, "type") : std::nullopt;
    if (!type) f.fail("response_format", "response_format must be an object with a string `type`");
    else if (*type == "json_object") p.json_object = true;
    else if (*type == "json_schema") {
      const Value* js = json::member(*rf, "json_schema");
      const Value* schema = js && js->IsObject() ? json::member(*js, "schema") : nullptr;
      const Value* name = js && js->IsObject() ? json::member(*js, "name") : nullptr;
      const Value* strict = js && js->IsObject() ? json::member(*js, "strict") : nullptr;
      if (!js || !js->IsObject()) f.fail("response_format.json_schema", "response_format.json_schema must be an object");
      else if (!name || !name->IsString())
        f.fail("response_format.json_schema.name", "response_format.json_schema.name must be a string (the format's name)");
      else if (strict && !strict->IsBool() && !strict->IsNull())
        f.fail("response_format.json_schema.strict", "response_format.json_schema.strict must be a boolean");
      else if (schema && !schema->IsObject() && !schema->IsBool())
        f.fail("response_format.json_schema.schema", "response_format.json_schema.schema must be a JSON Schema object");
      else if (!schema) p.json_object = true;  // no schema: any JSON object
      else {
        auto copy = std::make_shared<rapidjson::Document>();
        copy->CopyFrom(*schema, copy->GetAllocator());
        p.json_schema = std::move(copy);
      }
    } else if (*type != "text") {
      f.fail("response_format", "response_format.type must be text, json_object or json_schema");
    }
  }
  p.ignore_eos = f.boolean("ignore_eos").value_or(false);
  if (auto t = f.number("timeout", 0.001, 86400.0)) p.timeout_s = *t;
  return f.error;
}

// Requests are shallower and narrower than model files: OpenAI tool schemas nest a few levels, no
// field needs thousands of keys, while a prompt of token ids may be a whole long context. Every
// later walk of the body (copies, the template's variables) is then bounded by these too.
json::JsonLimits request_json_limits() {
  json::JsonLimits limits;
  limits.max_bytes = SIZE_MAX;  // the HTTP layer has already bounded the body (--body-limit)
  limits.max_string_bytes = SIZE_MAX;
  limits.max_depth = 64;
  limits.max_object_members = 10000;
  return limits;
}

}  // namespace

ApiResult<std::optional<bool>> optional_boolean(const Value& object, const char* name) {
  Fields f{object, std::nullopt};
  auto value = f.boolean(name);
  if (f.error) return *f.error;
  return value;
}

ApiResult<rapidjson::Document> parse_body_object(std::string_view body) {
  auto doc = json::parse(body, "request body", request_json_limits());
  if (!doc) return ApiError::bad_request(doc.message());
  if (!doc->IsObject()) return ApiError::bad_request("request body must be a JSON object");
  return std::move(*doc);
}

ApiResult<ChatRequest> parse_chat_request(std::string_view body, const RequestDefaults& defaults) {
  auto doc = parse_body_object(body);
  if (!doc) return doc.error();
  ChatRequest req;
  if (auto err = parse_common(*doc, defaults, /*chat=*/true, req.params)) return *err;
  const Value* messages = json::member(*doc, "messages");
  if (!messages) return ApiError::bad_request("messages is required", "messages");
  if (auto err = normalize_messages(*messages, req.messages)) return *err;
  ToolFields tool_fields;
  if (auto err = parse_tool_fields(*doc, tool_fields)) return *err;
  req.tools.Swap(tool_fields.tools);
  req.tool_choice = tool_fields.choice;
  req.forced_tool = tool_fields.forced_name;
  req.parallel_tool_calls = tool_fields.parallel_calls;
  auto agp = optional_boolean(*doc, "add_generation_prompt");
  if (!agp) return agp.error();
  req.add_generation_prompt = *agp;
  auto controls = parse_template_controls(*doc);
  if (!controls) return controls.error();
  req.template_controls = std::move(*controls);
  return req;
}

ApiResult<TextCompletionRequest> parse_completion_request(std::string_view body, const RequestDefaults& defaults) {
  auto doc = parse_body_object(body);
  if (!doc) return doc.error();
  TextCompletionRequest req;
  if (auto err = parse_common(*doc, defaults, /*chat=*/false, req.params)) return *err;
  const Value* prompt = json::member(*doc, "prompt");
  if (!prompt) return ApiError::bad_request("prompt is required", "prompt");
  const Value* p = prompt;
  // A one-element batch ([string] or [[ids]]) is the same as its element; larger batches need n > 1.
  if (p->IsArray() && p->Size() == 1 && ((*p)[0].IsString() || (*p)[0].IsArray())) p = &(*p)[0];
  if (p->IsString()) {
    req.prompt_text = std::string(p->GetString(), p->GetStringLength());
  } else if (p->IsArray()) {
    if (p->Empty()) return ApiError::bad_request("prompt must not be empty", "prompt");
    for (const auto& id : p->GetArray()) {
      if (!id.IsInt()) {
        return ApiError::bad_request(
            "prompt must be a string, an array of token ids, or a one-element batch of either", "prompt");
      }
      req.prompt_ids.push_back(id.GetInt());
    }
  } else {
    return ApiError::bad_request("prompt must be a string or an array of token ids", "prompt");
  }
  auto echo = optional_boolean(*doc, "echo");
  if (!echo) return echo.error();
  req.echo = echo->value_or(false);
  return req;
}

}  // namespace sluice::server
