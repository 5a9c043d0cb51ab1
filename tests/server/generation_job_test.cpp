#include "server/generation_job.h"

#include <map>

#include <gtest/gtest.h>

#include "job_fakes.h"

#include "util/json.h"

using namespace sluice;
using namespace sluice::server;

namespace {

// Token i's text is kPieces[i]; id 99 is a control token.
const std::map<int32_t, std::string> kPieces = {{0, "Hel"}, {1, "lo"}, {2, " wor"}, {3, "ld"}, {4, "!"}, {99, "<eos>"}};

// Tokens' texts from kPieces, id 99 the control token.
class FakeText : public test_fakes::TableText {
 public:
  FakeText() : TableText(kPieces, 99) {}
};
using test_fakes::RecordingChannel;

struct JobRun {
  std::shared_ptr<RecordingChannel> channel = std::make_shared<RecordingChannel>();
  std::shared_ptr<GenerationJob> job;
  GenerationRequest request;

  JobRun(bool chat, bool stream, std::vector<std::string> stop = {}, bool usage = false) {
    JobSpec spec;
    spec.identity = make_identity(chat, "tiny");
    spec.stream = stream;
    spec.include_usage = usage;
    spec.stop = std::move(stop);
    job = std::make_shared<GenerationJob>(std::move(spec), std::make_unique<FakeText>(), channel, nullptr);
    job->attach(request);
  }
  // Feeds ids until on_token says stop; returns how many were accepted.
  int feed(const std::vector<int32_t>& ids, FinishReason finish = FinishReason::kLength) {
    int n = 0;
    GenerationResult result;
    result.finish = finish;
    for (int32_t id : ids) {
      ++n;
      result.ids.push_back(id);
      if (!request.on_token(TokenEvent{id, -0.5f, {}})) {
        result.finish = FinishReason::kStop;
        break;
      }
    }
    result.stats.prompt_tokens = 5;
    result.stats.completion_tokens = n;
    request.on_done(result);
    return n;
  }
};

rapidjson::Document parse_event(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u);
  auto doc = json::parse(event.substr(6), "event");
  EXPECT_TRUE(doc.ok()) << event;
  return std::move(*doc);
}

}  // namespace

TEST(GenerationJob, AttachSharesTheChannelsCancelFlag) {
  JobRun run(true, false);
  EXPECT_EQ(run.request.cancelled, run.channel->flag);
}

TEST(GenerationJob, NonStreamedChatAnswersOnceWithMessageAndUsage) {
  JobRun run(true, false);
  run.feed({0, 1, 2, 3, 99}, FinishReason::kStop);
  ASSERT_EQ(run.channel->status, 200);
  auto doc = json::parse(run.channel->response, "response");
  ASSERT_TRUE(doc.ok());
  EXPECT_STREQ((*doc)["object"].GetString(), "chat.completion");
  EXPECT_STREQ((*doc)["choices"][0]["message"]["content"].GetString(), "Hello world");
  EXPECT_STREQ((*doc)["choices"][0]["finish_reason"].GetString(), "stop");
  EXPECT_EQ((*doc)["usage"]["total_tokens"].GetInt(), 10);
  EXPECT_TRUE((*doc)["timings"].IsObject() || (*doc)["usage"].IsObject());
}

TEST(GenerationJob, StopStringAcrossTokensEndsGenerationAndIsNotEmitted) {
  JobRun run(false, false, {"o w"});
  EXPECT_EQ(run.feed({0, 1, 2, 3, 4}), 3);  // "Hel" "lo" " wor": the stop completes on the third token
  auto doc = json::parse(run.channel->response, "response");
  EXPECT_STREQ((*doc)["choices"][0]["text"].GetString(), "Hell");
  EXPECT_STREQ((*doc)["choices"][0]["finish_reason"].GetString(), "stop");
}

TEST(GenerationJob, StreamedChatSendsRoleThenDeltasThenFinishThenUsageThenDone) {
  JobRun run(true, true, {}, /*usage=*/true);
  run.feed({0, 1, 2}, FinishReason::kLength);
  const auto& ev = run.channel->events;
  ASSERT_GE(ev.size(), 6u);
  auto first = parse_event(ev[0]);
  EXPECT_STREQ(first["object"].GetString(), "chat.completion.chunk");
  EXPECT_STREQ(first["choices"][0]["delta"]["role"].GetString(), "assistant");
  std::string id = first["id"].GetString();
  std::string text;
  std::size_t i = 1;
  for (; i < ev.size(); ++i) {
    auto chunk = parse_event(ev[i]);
    if (!chunk["choices"][0]["finish_reason"].IsNull()) break;
    EXPECT_EQ(id, chunk["id"].GetString());  // one id per completion
    text += chunk["choices"][0]["delta"]["content"].GetString();
  }
  EXPECT_EQ(text, "Hello wor");
  auto last = parse_event(ev[i]);
  EXPECT_STREQ(last["choices"][0]["finish_reason"].GetString(), "length");
  auto usage = parse_event(ev[i + 1]);
  EXPECT_EQ(usage["choices"].Size(), 0u);
  EXPECT_EQ(usage["usage"]["completion_tokens"].GetInt(), 3);
  EXPECT_EQ(ev[i + 2], "data: [DONE]\n\n");
  EXPECT_TRUE(run.channel->ended);
}

TEST(GenerationJob, StreamedTextCompletionHasNoRoleChunk) {
  JobRun run(false, true);
  run.feed({0, 1});
  auto first = parse_event(run.channel->events[0]);
  EXPECT_STREQ(first["object"].GetString(), "text_completion");
  EXPECT_STREQ(first["choices"][0]["text"].GetString(), "Hel");
}

TEST(GenerationJob, AClientThatCannotTakeMoreStopsGeneration) {
  JobRun run(true, true);
  run.channel->accept_events = 2;
  EXPECT_EQ(run.feed({0, 1, 2, 3, 4}), 2);
}

TEST(GenerationJob, EngineErrorBecomes500) {
  JobRun run(true, false);
  GenerationResult result;
  result.finish = FinishReason::kError;
  result.error = "boom";
  run.request.on_done(result);
  EXPECT_EQ(run.channel->status, 500);
  EXPECT_NE(run.channel->response.find("boom"), std::string::npos);
}
