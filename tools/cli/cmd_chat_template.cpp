// `sluice chat-template (--model DIR | --template FILE)`: renders a chat template with the JSON
// object of variables read from stdin and prints exactly the rendering (no trailing newline).
#include <cstdio>
#include <string>

#include "chat/template.h"
#include "commands.h"
#include "model_source.h"
#include "stdin_input.h"
#include "util/file_io.h"
#include "util/json.h"

namespace sluice::cli {

namespace {
void print_chat_template_usage() {
  std::fprintf(stderr,
               "usage: sluice chat-template (--model DIR | --template FILE) < variables.json\n"
               "  Renders the chat template with the JSON object on stdin (messages, tools,\n"
               "  add_generation_prompt, bos_token, eos_token, ...) and prints the result.\n");
}
}  // namespace

int run_chat_template(const Args& args) {
  std::string model_dir, template_file;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      print_chat_template_usage();
      return 0;
    }
    if ((a == "--model" || a == "--template") && i + 1 < args.size()) {
      (a == "--model" ? model_dir : template_file) = args[++i];
    } else if (a.rfind("--model=", 0) == 0) {
      model_dir = a.substr(8);
    } else if (a.rfind("--template=", 0) == 0) {
      template_file = a.substr(11);
    } else {
      std::fprintf(stderr, "sluice chat-template: unexpected argument '%s'\n", a.c_str());
      print_chat_template_usage();
      return 2;
    }
  }
  if (model_dir.empty() == template_file.empty()) {
    std::fprintf(stderr, "sluice chat-template: give exactly one of --model or --template\n");
    print_chat_template_usage();
    return 2;
  }
  if (!model_dir.empty()) {
    auto model = resolve_model_arg("chat-template", model_dir);
    if (!model) return 1;
    model_dir = model->dir;
  }
  auto source = model_dir.empty() ? read_text_file(template_file) : chat::load_chat_template_source(model_dir);
  if (!source) {
    std::fprintf(stderr, "sluice chat-template: %s\n", source.message().c_str());
    return 1;
  }
  auto input = read_stdin();
  if (!input) {
    std::fprintf(stderr, "sluice chat-template: %s\n", input.message().c_str());
    return 2;
  }
  auto vars = json::parse(*input, "stdin");
  if (!vars) {
    std::fprintf(stderr, "sluice chat-template: %s\n", vars.message().c_str());
    return 2;
  }
  if (!vars->IsObject()) {
    std::fprintf(stderr, "sluice chat-template: stdin must be a JSON object of template variables\n");
    return 2;
  }
  auto tmpl = chat::Template::parse(*source);
  if (!tmpl) {
    std::fprintf(stderr, "%s\n", tmpl.message().c_str());
    return 1;
  }
  auto rendered = tmpl->render(*vars);
  if (!rendered) {
    std::fprintf(stderr, "%s\n", rendered.message().c_str());
    return 1;
  }
  std::fwrite(rendered->data(), 1, rendered->size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace sluice::cli
