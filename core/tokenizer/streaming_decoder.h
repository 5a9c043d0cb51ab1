#pragma once
// StreamingDecoder is declared beside Tokenizer (it holds one); this header exists so code that
// only streams can include it by its own name. Implementation: streaming_decoder.cpp.
#include "tokenizer/tokenizer.h"
