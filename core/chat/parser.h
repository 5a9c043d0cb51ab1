#pragma once
// Builds the statement tree from tokens. Syntax errors throw TemplateError with the line number.
#include <string_view>

#include "chat/ast.h"

namespace sluice::chat {

Body parse_template(std::string_view source);

}  // namespace sluice::chat
