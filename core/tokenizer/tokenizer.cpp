#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/json_fields.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"
#include "util/file_io.h"
#include "util/json.h"

namespace sluice {

using namespace tokenizer;

Result<Tokenizer> Tokenizer::from_json_text(std::string_view json_text, const std::string& what) {
  auto parsed = json::parse(json_text, what);
  if (!parsed) return parsed.error();
  const rapidjson::Document& doc = *parsed;
  if (!doc.IsObject()) return make_error(what + ": not a JSON object");
  auto fail = [&](const Error& e) { return make_error(what + ": " + e.message); };
  static const rapidjson::Value null_value;
  auto member_or_null = [&](const char* name) -> const rapidjson::Value& {
    auto it = doc.FindMember(name);
    return it == doc.MemberEnd() ? null_value : it->value;
  };

  auto impl = std::make_shared<Impl>();
  const rapidjson::Value* model = field(doc, "model");
  if (model == nullptr || !model->IsObject()) return make_error(what + ": no \"model\"");
  // Files written before "type" was serialized are BPE when they carry merges.
  std::string type = field_string(*model, "type", model->HasMember("merges") ? "BPE" : "");
  if (type != "BPE") return make_error(what + ": unsupported model type '" + type + "' (only BPE is implemented)");
  auto bpe = BpeModel::from_json(*model);
  if (!bpe) return fail(bpe.error());
  impl->model = std::move(bpe).value();

  auto normalizer = make_normalizer(member_or_null("normalizer"));
  if (!normalizer) return fail(normalizer.error());
  impl->normalizer = std::move(normalizer).value();
  auto pre_tokenizer = make_pre_tokenizer(member_or_null("pre_tokenizer"));
  if (!pre_tokenizer) return fail(pre_tokenizer.error());
  impl->pre_tokenizer = std::move(pre_tokenizer).value();
  auto post_processor = make_post_processor(member_or_null("post_processor"));
  if (!post_processor) return fail(post_processor.error());
  impl->post_processor = std::move(post_processor).value();
  auto decoder = make_decoder(member_or_null("decoder"));
  if (!decoder) return fail(decoder.error());
  impl->decoder = std::move(decoder).value();
  auto added = AddedVocabulary::from_json(member_or_null("added_tokens"), impl->normalizer.get());
  if (!added) return fail(added.error());
  impl->added = std::move(added).value();
  return Tokenizer(std::move(impl));
}

Result<Tokenizer> Tokenizer::load(const std::filesystem::path& tokenizer_json) {
  auto text = read_text_file(tokenizer_json, json::JsonLimits{}.max_bytes);
  if (!text) return text.error();
  return from_json_text(*text, tokenizer_json.string());
}

Result<Tokenizer> Tokenizer::load_from_model_dir(const std::filesystem::path& dir) {
  auto loaded = load(dir / "tokenizer.json");
  if (!loaded) return loaded;
  auto config_path = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(config_path)) return loaded;
  auto config = json::parse_file(config_path);
  if (!config) return config.error();
  // "bos_token" is a string, {"content": ...} (older files) or null.
  auto token_id = [&](const char* name) -> std::optional<int32_t> {
    const rapidjson::Value* value = config->IsObject() ? field(*config, name) : nullptr;
    if (value == nullptr) return std::nullopt;
    std::string content = value->IsString() ? value->GetString() : value->IsObject() ? field_string(*value, "content") : "";
    return content.empty() ? std::nullopt : loaded->token_to_id(content);
  };
  auto impl = std::const_pointer_cast<Impl>(loaded->impl_);  // sole owner: still being built
  impl->bos_id = token_id("bos_token");
  impl->eos_id = token_id("eos_token");
  return loaded;
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special_tokens) const {
  const Impl& s = *impl_;
  // Regexes and normalizers need valid UTF-8; HF's input is a Rust str, so invalid bytes can only
  // reach it as U+FFFD.
  std::string repaired;
  std::string_view text = input;
  if (!is_valid_utf8(input)) {
    repaired = utf8_lossy(input);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 8);
  std::vector<Piece> pieces;
  for (const AddedSplit& raw : s.added.split_raw(text)) {
    if (raw.id) {
      ids.push_back(*raw.id);
      continue;
    }
    std::string_view segment = text.substr(raw.begin, raw.end - raw.begin);
    std::string normalized = s.normalizer ? s.normalizer->normalize(segment) : std::string(segment);
    for (const AddedSplit& split : s.added.split_normalized(normalized)) {
      if (split.id) {
        ids.push_back(*split.id);
        continue;
      }
      pieces.clear();
      pieces.push_back({normalized.substr(split.begin, split.end - split.begin), raw.begin == 0 && split.begin == 0});
      if (s.pre_tokenizer) s.pre_tokenizer->pre_tokenize(pieces);
      for (const Piece& piece : pieces) s.model->tokenize(piece.text, ids);
    }
  }
  if (add_special_tokens && s.post_processor) ids = s.post_processor->process(std::move(ids));
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const Impl& s = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    if (const std::string* token = s.token_string(id)) tokens.push_back(*token);  // unknown ids are dropped, as in HF
  }
  std::string text;
  if (s.decoder) {
    for (const auto& part : s.decoder->decode_chain(std::move(tokens))) text += part;
  } else {
    for (std::size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
  }
  return text;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  const Impl& s = *impl_;
  const std::string* token = s.token_string(id);  // added tokens go through the decoder too, as in decode()
  if (!token) return {};
  return s.decoder ? s.decoder->piece_bytes(*token) : *token;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.id_of(token)) return id;
  return impl_->model->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  const std::string* token = impl_->token_string(id);
  return token ? *token : std::string();
}

bool Tokenizer::is_special(int32_t id) const {
  const AddedToken* token = impl_->added.by_id(id);
  return token != nullptr && token->special;
}

std::size_t Tokenizer::vocab_size() const {
  std::size_t size = impl_->model->id_space();
  for (const auto& token : impl_->added.tokens()) size = std::max(size, static_cast<std::size_t>(token.id) + 1);
  return size;
}

std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos_id; }

}  // namespace sluice
