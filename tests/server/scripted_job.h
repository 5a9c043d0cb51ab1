#pragma once
// A real GenerationJob driven by a script of token texts instead of a model: what a model of some
// family writes (special tokens included) goes through the job's actual text, stop, tool-call and
// response code, and the channel keeps what a client would have received.
#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "job_fakes.h"
#include "server/generation_job.h"

namespace sluice::server::scripted {

// Token i's text is pieces[i]; those in `specials` are control tokens (hidden unless needed).
class ScriptedText : public TokenText {
 public:
  ScriptedText(std::vector<std::string> pieces, std::set<std::string> specials)
      : pieces_(std::move(pieces)), specials_(std::move(specials)) {}
  std::string push(int32_t id) override { return pieces_.at(static_cast<std::size_t>(id)); }
  std::string flush() override { return ""; }
  std::string piece(int32_t id) override { return pieces_.at(static_cast<std::size_t>(id)); }
  bool is_control(int32_t id) override { return specials_.contains(pieces_.at(static_cast<std::size_t>(id))); }

 private:
  std::vector<std::string> pieces_;
  std::set<std::string> specials_;
};

using CapturingChannel = test_fakes::RecordingChannel;  // what a client would have received

// Feeds every token (until the job says stop), then ends the generation with `finish`.
inline std::shared_ptr<CapturingChannel> run_scripted(JobSpec spec, const std::vector<std::string>& tokens,
                                                      const std::set<std::string>& specials,
                                                      FinishReason finish = FinishReason::kStop) {
  auto channel = std::make_shared<CapturingChannel>();
  auto job = std::make_shared<GenerationJob>(std::move(spec), std::make_unique<ScriptedText>(tokens, specials),
                                             channel, nullptr);
  GenerationRequest request;
  job->attach(request);
  GenerationResult result;
  result.finish = finish;
  for (int32_t i = 0; i < static_cast<int32_t>(tokens.size()); ++i) {
    result.ids.push_back(i);
    if (!request.on_token(TokenEvent{i, -0.1f, {}})) break;
  }
  request.on_done(result);
  return channel;
}

}  // namespace sluice::server::scripted
