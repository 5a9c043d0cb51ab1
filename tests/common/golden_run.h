#pragma once
// A model run against its golden.json (HF transformers) as every golden-model test checks it: the
// engine options for a model folder of ../shared/models, and the two checks of each prompt.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/runtime.h"
#include "golden.h"
#include "reference.h"

namespace sluice::test {

inline EngineOptions golden_options(const std::string& model, const std::string& backend, const std::string& codec,
                                    int ctx_size) {
  EngineOptions o;
  o.model_dir = reference_path("models/" + model).string();
  o.plugin_dir = binary_path("lib").string();
  o.backend = backend;
  o.kv_codec = codec;
  o.threads = 2;
  o.ctx_size = ctx_size;
  return o;
}

// For every prompt of `golden`: the prompt's last-position logits from rt within 1e-3 × max|logit| of
// the golden's (a cache that rounds K and V is held to the greedy ids alone: logits_too false), and
// engine's greedy continuation — no EOS stop, as the goldens were made — the golden's ids exactly.
inline void expect_golden_prompts(Runtime& rt, Engine& engine, const rapidjson::Value& golden, const std::string& model,
                                  bool logits_too = true) {
  for (const auto& prompt : golden["prompts"].GetArray()) {
    SCOPED_TRACE(model + ": prompt " + prompt["text"].GetString());
    const auto ids = golden_ids(prompt["ids"]);
    SequenceState seq;
    std::vector<float> logits;
    const auto ran = rt.run(seq, ids, false, logits);
    ASSERT_TRUE(ran.ok()) << ran.message();
    rt.release(seq);
    ASSERT_EQ(logits.size(), prompt["last_logits"].GetArray().Size());
    if (logits_too) {
      const auto [max_err, max_abs] = logit_distance(logits, prompt["last_logits"]);
      EXPECT_LE(max_err, 1e-3 * max_abs);
    }

    GenerationRequest req;
    req.prompt_ids = ids;
    req.max_tokens = static_cast<int>(prompt["greedy_ids"].Size());
    req.sampling.temperature = 0;
    req.ignore_eos = true;
    auto result = engine.generate(req);
    ASSERT_NE(result.finish, FinishReason::kError) << result.error;
    EXPECT_EQ(result.ids, golden_ids(prompt["greedy_ids"]));
  }
}

}  // namespace sluice::test
