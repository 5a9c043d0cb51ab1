#include "server/generation_job.h"

#include <map>

#include <gtest/gtest.h>

#include "job_fakes.h"

#include "util/json.h"

using namespace sluice;
using namespace sluice::server;

namespace {

// Token i's text is kPieces[i] (5: none, as a byte of a character not yet complete); id 99 is a control token.
const std::map<int32_t, std::string> kPieces = {{0, "Hel"}, {1, "lo"}, {2, " wor"}, {3, "ld"}, {4, "!"}, {5, ""}, {99, "<eos>"}};

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

TEST(GenerationJob, StreamedTextCompletionSendsItsFirstTokenEvenWithoutText) {
  // A client sees when generation started (as a chat stream's role chunk shows); later tokens without
  // text send nothing.
  JobRun run(false, true);
  run.feed({5, 5, 0, 5, 1});
  const auto& ev = run.channel->events;
  ASSERT_GE(ev.size(), 4u);
  std::vector<std::string> texts;
  for (const auto& e : ev) {
    if (e == "data: [DONE]\n\n") break;
    auto chunk = parse_event(e);
    if (!chunk["choices"][0]["finish_reason"].IsNull()) break;
    texts.push_back(chunk["choices"][0]["text"].GetString());
  }
  EXPECT_EQ(texts, (std::vector<std::string>{"", "Hel", "lo"}));
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

namespace {

// A job of n choices, fed token by token in an interleaving the test chooses (as the engine's
// batched steps would), each choice ending with its own result.
struct ChoicesRun {
  std::shared_ptr<RecordingChannel> channel = std::make_shared<RecordingChannel>();
  std::shared_ptr<GenerationJob> job;
  GenerationRequest request;

  ChoicesRun(int n, bool chat, bool stream, std::vector<std::string> stop = {}) {
    JobSpec spec;
    spec.identity = make_identity(chat, "tiny");
    spec.stream = stream;
    spec.include_usage = true;
    spec.stop = std::move(stop);
    std::vector<std::unique_ptr<TokenText>> texts;
    for (int i = 0; i < n; ++i) texts.push_back(std::make_unique<FakeText>());
    job = std::make_shared<GenerationJob>(std::move(spec), std::move(texts), channel, nullptr);
    job->attach(request);
  }
  bool token(int choice, int32_t id) {
    TokenEvent e{id, -0.5f, {}};
    e.choice = choice;
    return request.on_token(e);
  }
  void done(int choice, FinishReason finish, int completion_tokens) {
    GenerationResult r;
    r.choice = choice;
    r.finish = finish;
    r.stats.prompt_tokens = 5;
    r.stats.completion_tokens = completion_tokens;
    request.on_done(r);
  }
};

}  // namespace

TEST(GenerationJobChoices, AttachAsksTheEngineForEveryChoice) {
  ChoicesRun run(3, true, false);
  EXPECT_EQ(run.request.n, 3);
}

TEST(GenerationJobChoices, NonStreamedAnswerHoldsEveryChoiceInOrderWithItsOwnFinishAndOneUsage) {
  ChoicesRun run(2, true, false, {"wor"});
  // Interleaved as a batch decodes them; choice 1 meets the stop string, choice 0 runs to its length.
  EXPECT_TRUE(run.token(1, 0));
  EXPECT_TRUE(run.token(0, 4));
  EXPECT_TRUE(run.token(1, 1));
  EXPECT_TRUE(run.token(0, 0));
  EXPECT_FALSE(run.token(1, 2));  // " wor" completes the stop string: this choice stops
  run.done(1, FinishReason::kStop, 3);
  EXPECT_EQ(run.channel->status, 0) << "answered before every choice ended";
  EXPECT_TRUE(run.token(0, 3));
  run.done(0, FinishReason::kLength, 3);
  ASSERT_EQ(run.channel->status, 200);
  auto doc = json::parse(run.channel->response, "response");
  ASSERT_TRUE(doc.ok());
  const auto& choices = (*doc)["choices"];
  ASSERT_EQ(choices.Size(), 2u);
  EXPECT_EQ(choices[0]["index"].GetInt(), 0);
  EXPECT_EQ(choices[1]["index"].GetInt(), 1);
  EXPECT_STREQ(choices[0]["message"]["content"].GetString(), "!Helld");
  EXPECT_STREQ(choices[0]["finish_reason"].GetString(), "length");
  EXPECT_STREQ(choices[1]["message"]["content"].GetString(), "Hello ");
  EXPECT_STREQ(choices[1]["finish_reason"].GetString(), "stop");
  EXPECT_EQ((*doc)["usage"]["prompt_tokens"].GetInt(), 5);  // the prompt once
  EXPECT_EQ((*doc)["usage"]["completion_tokens"].GetInt(), 6);
  EXPECT_EQ((*doc)["usage"]["total_tokens"].GetInt(), 11);
}

TEST(GenerationJobChoices, StreamedChunksCarryTheirChoiceAndTheStreamEndsAfterTheLast) {
  ChoicesRun run(2, true, true);
  run.token(0, 0);
  run.token(1, 2);
  run.token(0, 1);
  run.done(0, FinishReason::kStop, 2);
  run.token(1, 3);
  EXPECT_FALSE(run.channel->ended);
  run.done(1, FinishReason::kLength, 2);
  ASSERT_TRUE(run.channel->ended);
  const auto& ev = run.channel->events;
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "data: [DONE]\n\n");
  std::map<int, std::string> text, finish;
  std::map<int, int> roles;
  int usage_chunks = 0;
  for (std::size_t i = 0; i + 1 < ev.size(); ++i) {
    auto chunk = parse_event(ev[i]);
    if (chunk["choices"].Empty()) {
      ++usage_chunks;
      EXPECT_EQ(i + 2, ev.size()) << "usage comes last, once";
      EXPECT_EQ(chunk["usage"]["prompt_tokens"].GetInt(), 5);
      EXPECT_EQ(chunk["usage"]["completion_tokens"].GetInt(), 4);
      continue;
    }
    const auto& c = chunk["choices"][0];
    const int index = c["index"].GetInt();
    const auto& delta = c["delta"];
    if (delta.HasMember("role")) ++roles[index];
    if (delta.HasMember("content")) text[index] += delta["content"].GetString();
    if (!c["finish_reason"].IsNull()) {
      EXPECT_EQ(finish.count(index), 0u) << "choice " << index << " finished twice";
      finish[index] = c["finish_reason"].GetString();
    }
  }
  EXPECT_EQ(usage_chunks, 1);
  EXPECT_EQ(roles, (std::map<int, int>{{0, 1}, {1, 1}}));
  EXPECT_EQ(text[0], "Hello");
  EXPECT_EQ(text[1], " world");
  EXPECT_EQ(finish[0], "stop");
  EXPECT_EQ(finish[1], "length");
}

TEST(GenerationJobChoices, OneChoiceFailingAnswers500OnceAndStopsTheOthers) {
  ChoicesRun run(3, false, false);
  run.token(0, 0);
  GenerationResult failed;
  failed.choice = 1;
  failed.finish = FinishReason::kError;
  failed.error = "boom";
  run.request.on_done(failed);
  EXPECT_EQ(run.channel->status, 500);
  EXPECT_FALSE(run.token(0, 1)) << "the others stop at their next token";
  run.channel->status = 0;
  run.done(0, FinishReason::kStop, 2);
  run.done(2, FinishReason::kStop, 0);
  EXPECT_EQ(run.channel->status, 0) << "answered twice";
}
