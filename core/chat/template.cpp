// Public entry points: parse/render with every engine failure turned into a Result error.
#include "chat/template.h"

#include <new>

#include "chat/interpreter.h"
#include "chat/parser.h"
#include "util/file_io.h"
#include "util/json.h"

namespace sluice::chat {

Result<Template> Template::parse(std::string_view source) {
  try {
    Template t;
    t.body_ = std::make_shared<const Body>(parse_template(source));
    return t;
  } catch (const TemplateError& e) {
    return make_error(e.what());
  } catch (const std::bad_alloc&) {
    return make_error("template too large to parse");
  } catch (const std::exception& e) {
    return make_error(std::string("TemplateSyntaxError: ") + e.what());
  }
}

Result<std::string> Template::render(const rapidjson::Value& variables) const {
  return render(variables, std::chrono::system_clock::now());
}

Result<std::string> Template::render(const rapidjson::Value& variables, std::chrono::system_clock::time_point now) const {
  return render(variables, now, RenderOptions{});
}

Result<std::string> Template::render(const rapidjson::Value& variables, std::chrono::system_clock::time_point now,
                                     const RenderOptions& options) const {
  if (!body_) return make_error("template was not parsed");
  if (!variables.IsObject()) return make_error("template variables must be a JSON object");
  try {
    Interpreter interpreter(now, options);
    return interpreter.render(*body_, variables);
  } catch (const TemplateError& e) {
    return make_error(e.what());
  } catch (const std::bad_alloc&) {
    return make_error("TemplateRuntimeError: out of memory while rendering");
  } catch (const std::exception& e) {
    return make_error(std::string("TemplateRuntimeError: ") + e.what());
  }
}

Result<std::string> load_chat_template_source(const std::filesystem::path& model_dir) {
  std::error_code ec;
  auto jinja = model_dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja, ec)) return read_text_file(jinja);
  auto config_path = model_dir / "tokenizer_config.json";
  if (!std::filesystem::exists(config_path, ec))
    return make_error("no chat template in " + model_dir.string() + " (neither chat_template.jinja nor tokenizer_config.json)");
  auto config = json::parse_file(config_path);
  if (!config) return config.error();
  const rapidjson::Value* t = json::member(*config, "chat_template");
  if (!t) return make_error(config_path.string() + " has no chat_template");
  if (t->IsString()) return std::string(t->GetString(), t->GetStringLength());
  if (t->IsArray()) {
    for (const auto& entry : t->GetArray()) {
      if (!entry.IsObject()) continue;
      auto name = json::string(entry, "name");
      auto text = json::string(entry, "template");
      if (name && text && *name == "default") return *text;
    }
    return make_error(config_path.string() + ": chat_template list has no \"default\" entry");
  }
  return make_error(config_path.string() + ": chat_template must be a string or a list of {name, template}");
}

}  // namespace sluice::chat
