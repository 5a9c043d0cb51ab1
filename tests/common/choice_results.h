#pragma once
// Runs a request of n choices (GenerationRequest::n) to its end: every choice's result and the
// tokens it streamed, by choice index.
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"

namespace sluice::test {

struct ChoiceResults {
  std::map<int, GenerationResult> results;
  std::map<int, std::vector<int32_t>> streamed;
};

inline ChoiceResults run_choices(Engine& engine, GenerationRequest request) {
  auto req = std::make_shared<GenerationRequest>(std::move(request));
  auto out = std::make_shared<ChoiceResults>();
  auto mu = std::make_shared<std::mutex>();
  auto all_done = std::make_shared<std::promise<void>>();
  const int n = req->n;
  req->on_token = [out, mu](const TokenEvent& e) {
    std::lock_guard lock(*mu);
    out->streamed[e.choice].push_back(e.id);
    return true;
  };
  req->on_done = [out, mu, all_done, n](const GenerationResult& r) {
    std::lock_guard lock(*mu);
    EXPECT_EQ(out->results.count(r.choice), 0u) << "choice " << r.choice << " ended twice";
    out->results[r.choice] = r;
    if (static_cast<int>(out->results.size()) == n) all_done->set_value();
  };
  auto submitted = engine.submit(req);
  EXPECT_TRUE(submitted.ok()) << submitted.message();
  if (!submitted) return {};
  all_done->get_future().wait();
  std::lock_guard lock(*mu);
  return *out;
}

}  // namespace sluice::test
