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

// Found by the fuzz harness (tests/fuzz/sse_stop_fuzz.cpp): a bare \r ended the client's line early.
TEST(Sse, CarriageReturnsBreakLinesAsTheClientWill) {
  EXPECT_EQ(sse_event("a\rb\r\nc\n\rd"), "data: a\ndata: b\ndata: c\ndata: \ndata: d\n\n");
  EXPECT_EQ(sse_event("x\r"), "data: x\ndata: \n\n");
}
