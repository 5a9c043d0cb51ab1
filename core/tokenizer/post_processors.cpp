#include "tokenizer/post_processors.h"

#include <optional>
#include <string>

#include "tokenizer/json_fields.h"
#include "tokenizer/string_map.h"

namespace sluice::tokenizer {
namespace {

using Ptr = std::unique_ptr<const PostProcessor>;

class Identity final : public PostProcessor {
 public:
  std::vector<int32_t> process(std::vector<int32_t> ids) const override { return ids; }
};

// A list of pieces: fixed special-token ids, or the encoded sequence itself.
class Template final : public PostProcessor {
 public:
  struct Item {
    bool is_sequence = false;
    std::vector<int32_t> ids;  // for special tokens
  };
  explicit Template(std::vector<Item> items) : items_(std::move(items)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    std::vector<int32_t> out;
    out.reserve(ids.size() + items_.size());
    for (const auto& item : items_) {
      if (item.is_sequence) out.insert(out.end(), ids.begin(), ids.end());
      else out.insert(out.end(), item.ids.begin(), item.ids.end());
    }
    return out;
  }

 private:
  std::vector<Item> items_;
};

class Sequence final : public PostProcessor {
 public:
  explicit Sequence(std::vector<Ptr> steps) : steps_(std::move(steps)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    for (const auto& step : steps_) ids = step->process(std::move(ids));
    return ids;
  }

 private:
  std::vector<Ptr> steps_;
};

Result<Ptr> make_template(const rapidjson::Value& spec) {
  StringMap<std::vector<int32_t>> specials;
  if (const auto* map = field(spec, "special_tokens"); map != nullptr && map->IsObject()) {
    for (const auto& entry : map->GetObject()) {
      std::vector<int32_t> ids;
      if (const auto* list = field_array(entry.value, "ids"))
        for (const auto& id : list->GetArray()) {
          if (!is_token_id(id))
            return make_error("TemplateProcessing special token '" + std::string(entry.name.GetString()) +
                              "' has an id that is not " + token_id_rule());
          ids.push_back(id.GetInt());
        }
      specials[entry.name.GetString()] = std::move(ids);
    }
  }
  const auto* single = field_array(spec, "single");
  if (single == nullptr) return make_error("TemplateProcessing without a \"single\" template");
  std::vector<Template::Item> items;
  for (const auto& piece : single->GetArray()) {
    if (!piece.IsObject()) return make_error("TemplateProcessing item must be an object");
    if (piece.HasMember("Sequence")) {
      items.push_back({true, {}});
    } else if (const auto* special = field(piece, "SpecialToken")) {
      std::string name = field_string(*special, "id");
      auto it = specials.find(name);
      if (it == specials.end()) return make_error("TemplateProcessing names unknown special token '" + name + "'");
      items.push_back({false, it->second});
    } else {
      return make_error("TemplateProcessing item is neither Sequence nor SpecialToken");
    }
  }
  return Ptr(new Template(std::move(items)));
}

// BertProcessing / RobertaProcessing: cls + sequence + sep, with "cls": ["[CLS]", 101].
Result<Ptr> make_cls_sep(const rapidjson::Value& spec) {
  auto id_of = [&](const char* name) -> std::optional<int32_t> {
    const auto* pair = field_array(spec, name);
    if (pair == nullptr || pair->Size() != 2 || !is_token_id((*pair)[1])) return std::nullopt;
    return (*pair)[1].GetInt();
  };
  auto cls = id_of("cls"), sep = id_of("sep");
  if (!cls || !sep) return make_error("Bert/RobertaProcessing without cls/sep ids (each " + token_id_rule() + ")");
  std::vector<Template::Item> items{{false, {*cls}}, {true, {}}, {false, {*sep}}};
  return Ptr(new Template(std::move(items)));
}

}  // namespace

Result<std::unique_ptr<const PostProcessor>> make_post_processor(const rapidjson::Value& spec) {
  if (spec.IsNull()) return Ptr{};
  if (!spec.IsObject()) return make_error("post_processor must be an object or null");
  std::string type = field_string(spec, "type");
  if (type == "ByteLevel") return Ptr(new Identity());  // it only adjusts offsets, never ids
  if (type == "TemplateProcessing") return make_template(spec);
  if (type == "BertProcessing" || type == "RobertaProcessing") return make_cls_sep(spec);
  if (type == "Sequence") {
    const auto* list = field_array(spec, "processors");
    if (list == nullptr) return make_error("Sequence post_processor without \"processors\"");
    std::vector<Ptr> steps;
    for (const auto& item : list->GetArray()) {
      auto step = make_post_processor(item);
      if (!step) return step.error();
      if (*step) steps.push_back(std::move(step).value());
    }
    return Ptr(new Sequence(std::move(steps)));
  }
  return make_error("unsupported post_processor type '" + type + "'");
}

}  // namespace sluice::tokenizer
