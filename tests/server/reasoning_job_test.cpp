// A chat completion from a <think>-style model: the reasoning reaches message.reasoning_content
// (plain) or delta.reasoning_content chunks before the delta.content ones (streamed), with the tags
// split across tokens.
#include <map>

#include <gtest/gtest.h>

#include "job_fakes.h"

#include "server/generation_job.h"
#include "util/json.h"

using namespace sluice;
using namespace sluice::server;

namespace {

// The tags arrive cut inside: "<th" + "ink>\n", "</thi" + "nk>\n\n". Id 99 is EOS.
const std::map<int32_t, std::string> kPieces = {{10, "<th"}, {11, "ink>\n"}, {12, "Two and"}, {13, " two."},
                                                {14, "</thi"}, {15, "nk>\n\n"}, {16, "Four"}, {17, "."}, {99, ""}};

// Tokens' texts from kPieces, id 99 the control token.
class FakeText : public test_fakes::TableText {
 public:
  FakeText() : TableText(kPieces, 99) {}
};
using test_fakes::RecordingChannel;

// Runs a chat completion over `ids`; split_reasoning as the handler sets it for a <think> template.
std::shared_ptr<RecordingChannel> run(const std::vector<int32_t>& ids, bool stream, bool split, bool opened = false,
                                      bool logprobs = false) {
  auto channel = std::make_shared<RecordingChannel>();
  JobSpec spec;
  spec.identity = make_identity(true, "tiny");
  spec.stream = stream;
  spec.split_reasoning = split;
  spec.prompt_opened_think = opened;
  spec.logprobs = logprobs;
  auto job = std::make_shared<GenerationJob>(std::move(spec), std::make_unique<FakeText>(), channel, nullptr);
  GenerationRequest request;
  job->attach(request);
  GenerationResult result;
  result.finish = FinishReason::kStop;
  for (int32_t id : ids) {
    request.on_token(TokenEvent{id, -0.5f, {}});
    result.ids.push_back(id);
  }
  request.on_done(result);
  return channel;
}

const rapidjson::Value& message(const rapidjson::Document& doc) { return doc["choices"][0]["message"]; }

struct Streamed {
  std::string reasoning, content;
  bool content_before_reasoning_ended = false;
};

Streamed reassemble(const std::vector<std::string>& events) {
  Streamed s;
  for (const auto& e : events) {
    if (e.rfind("data: {", 0) != 0) continue;
    auto doc = json::parse(e.substr(6), "chunk");
    EXPECT_TRUE(doc.ok()) << e;
    if (!doc) continue;
    const auto& delta = (*doc)["choices"][0]["delta"];
    if (delta.HasMember("reasoning_content")) {
      if (!s.content.empty()) s.content_before_reasoning_ended = true;
      s.reasoning += delta["reasoning_content"].GetString();
    }
    if (delta.HasMember("content")) s.content += delta["content"].GetString();
  }
  return s;
}

}  // namespace

TEST(ReasoningJob, PlainAnswerPutsTheThinkBlockInReasoningContent) {
  auto channel = run({10, 11, 12, 13, 14, 15, 16, 17, 99}, false, true);
  ASSERT_EQ(channel->status, 200) << channel->response;
  auto doc = json::parse(channel->response, "response");
  ASSERT_TRUE(doc.ok());
  EXPECT_STREQ(message(*doc)["reasoning_content"].GetString(), "Two and two.");
  EXPECT_STREQ(message(*doc)["content"].GetString(), "Four.");
}

TEST(ReasoningJob, StreamedReasoningDeltasComeBeforeContentDeltas) {
  auto channel = run({10, 11, 12, 13, 14, 15, 16, 17, 99}, true, true);
  Streamed s = reassemble(channel->events);
  EXPECT_EQ(s.reasoning, "Two and two.");
  EXPECT_EQ(s.content, "Four.");
  EXPECT_FALSE(s.content_before_reasoning_ended);
  EXPECT_EQ(channel->events.back(), "data: [DONE]\n\n");
}

TEST(ReasoningJob, StreamedLogprobsCoverEveryTokenOnceAcrossReasoningAndContentChunks) {
  const std::vector<int32_t> ids = {10, 11, 12, 13, 14, 15, 16, 17};
  auto channel = run(ids, true, true, false, /*logprobs=*/true);
  std::string tokens;
  for (const auto& e : channel->events) {
    if (e.rfind("data: {", 0) != 0) continue;
    auto doc = json::parse(e.substr(6), "chunk");
    ASSERT_TRUE(doc.ok()) << e;
    if ((*doc)["choices"].Empty()) continue;
    const auto& lp = (*doc)["choices"][0]["logprobs"];
    if (lp.IsObject())
      for (const auto& t : lp["content"].GetArray()) tokens += t["token"].GetString();
  }
  std::string expected;
  for (int32_t id : ids) expected += kPieces.at(id);
  EXPECT_EQ(tokens, expected);
  EXPECT_EQ(reassemble(channel->events).reasoning, "Two and two.");
}

TEST(ReasoningJob, AnOpenedThinkWithoutCloseIsAllReasoning) {
  auto plain = run({12, 13, 99}, false, true, /*opened=*/true);
  auto doc = json::parse(plain->response, "response");
  ASSERT_TRUE(doc.ok());
  EXPECT_STREQ(message(*doc)["reasoning_content"].GetString(), "Two and two.");
  EXPECT_STREQ(message(*doc)["content"].GetString(), "");
  Streamed s = reassemble(run({12, 13, 99}, true, true, true)->events);
  EXPECT_EQ(s.reasoning, "Two and two.");
  EXPECT_EQ(s.content, "");
}

TEST(ReasoningJob, AnAnswerWithoutThinkingHasNullReasoningAndOtherModelsNoField) {
  auto reasoning_model = json::parse(run({16, 17, 99}, false, true)->response, "response");
  ASSERT_TRUE(reasoning_model.ok());
  EXPECT_TRUE(message(*reasoning_model)["reasoning_content"].IsNull());
  EXPECT_STREQ(message(*reasoning_model)["content"].GetString(), "Four.");
  auto plain_model = json::parse(run({10, 11, 12, 14, 15, 16, 99}, false, false)->response, "response");
  ASSERT_TRUE(plain_model.ok());
  EXPECT_FALSE(message(*plain_model).HasMember("reasoning_content"));
  EXPECT_STREQ(message(*plain_model)["content"].GetString(), "<think>\nTwo and</think>\n\nFour");
}

// n choices: each splits its own reasoning — one still thinking while the other answers.
TEST(ReasoningJob, EachChoiceSplitsItsOwnReasoning) {
  auto channel = std::make_shared<RecordingChannel>();
  JobSpec spec;
  spec.identity = make_identity(true, "tiny");
  spec.split_reasoning = true;
  std::vector<std::unique_ptr<TokenText>> texts;
  texts.push_back(std::make_unique<FakeText>());
  texts.push_back(std::make_unique<FakeText>());
  auto job = std::make_shared<GenerationJob>(std::move(spec), std::move(texts), channel, nullptr);
  GenerationRequest request;
  job->attach(request);
  auto token = [&](int choice, int32_t id) {
    TokenEvent e{id, -0.5f, {}};
    e.choice = choice;
    request.on_token(e);
  };
  // Choice 0 reasons then answers; choice 1 answers at once (no tags), interleaved.
  for (int32_t id : {10, 11, 12}) token(0, id);
  token(1, 16);
  for (int32_t id : {13, 14, 15}) token(0, id);
  token(1, 17);
  token(0, 16);
  GenerationResult done;
  done.finish = FinishReason::kStop;
  for (int c : {1, 0}) {
    done.choice = c;
    request.on_done(done);
  }
  auto doc = json::parse(channel->response, "response");
  ASSERT_TRUE(doc.ok()) << channel->response;
  const auto& choices = (*doc)["choices"];
  ASSERT_EQ(choices.Size(), 2u);
  EXPECT_STREQ(choices[0]["message"]["reasoning_content"].GetString(), "Two and two.");
  EXPECT_STREQ(choices[0]["message"]["content"].GetString(), "Four");
  EXPECT_TRUE(choices[1]["message"]["reasoning_content"].IsNull());
  EXPECT_STREQ(choices[1]["message"]["content"].GetString(), "Four.");
}
