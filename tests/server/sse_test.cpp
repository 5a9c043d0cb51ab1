#include "server/sse.h"

#include <gtest/gtest.h>

using namespace sluice::server;

TEST(Sse, OneJsonPayloadIsOneDataLineAndABlankLine) {
  EXPECT_EQ(sse_event(R"({"a":1})"), "data: {\"a\":1}\n\n");
}

TEST(Sse, NewlinesInAPayloadBecomeSeveralDataLines) {
  EXPECT_EQ(sse_event("x\ny"), "data: x\ndata: y\n\n");
}

TEST(Sse, DoneMarkerEndsTheStream) { EXPECT_EQ(sse_done(), "data: [DONE]\n\n"); }
