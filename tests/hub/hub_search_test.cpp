// The hub's search answer (GET /api/models?search=) read into summaries: what the web app's Models tab lists.
#include <gtest/gtest.h>

#include "hub/hub_api.h"

namespace sluice::hub {
namespace {

TEST(HubSearch, ReadsTheFieldsTheAppShows) {
  auto found = parse_model_search(
      R"([{"id":"Qwen/Qwen2.5-0.5B-Instruct","downloads":123,"likes":4,"pipeline_tag":"text-generation",
           "library_name":"transformers","gated":false},
          {"modelId":"meta-llama/Llama-3.2-1B","gated":"manual"}])", 20);
  ASSERT_TRUE(found) << found.message();
  ASSERT_EQ(found->size(), 2u);
  EXPECT_EQ((*found)[0].id, "Qwen/Qwen2.5-0.5B-Instruct");
  EXPECT_EQ((*found)[0].downloads, 123);
  EXPECT_EQ((*found)[0].likes, 4);
  EXPECT_EQ((*found)[0].pipeline_tag, "text-generation");
  EXPECT_FALSE((*found)[0].gated);
  EXPECT_EQ((*found)[1].id, "meta-llama/Llama-3.2-1B");  // older answers name it modelId
  EXPECT_EQ((*found)[1].downloads, -1);                   // not reported
  EXPECT_TRUE((*found)[1].gated);
}

TEST(HubSearch, DropsEntriesWithoutAValidIdAndKeepsTheLimit) {
  auto found = parse_model_search(R"([{"id":"../escape"},{"id":"no-slash"},{"id":"a/b@main"},5,{"downloads":1},
                                      {"id":"org/one"},{"id":"org/two"},{"id":"org/three"}])", 2);
  ASSERT_TRUE(found) << found.message();
  ASSERT_EQ(found->size(), 2u);
  EXPECT_EQ((*found)[0].id, "org/one");
  EXPECT_EQ((*found)[1].id, "org/two");
}

TEST(HubSearch, RefusesAnswersThatAreNotAList) {
  EXPECT_FALSE(parse_model_search(R"({"error":"boom"})", 5));
  EXPECT_FALSE(parse_model_search("not json", 5));
  const std::string deep(100, '[');
  EXPECT_FALSE(parse_model_search(deep, 5));  // nesting past the parser's limit
}

}  // namespace
}  // namespace sluice::hub
