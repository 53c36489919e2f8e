// core/transfer_spans.h: transfers are noted only while a recording is on, from any thread, and
// taken in the order they ended; a second recording at once is refused.
#include "tessel/core/transfer_spans.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "tessel/core/check.h"

namespace tessel {
namespace {

TEST(TransferSpans, NotedOnlyWhileRecordingFromAnyThreadInOrder) {
  EXPECT_FALSE(recording_transfer_spans());
  note_transfer_span(TracedTransfer::moe_dispatch, 1.0, 2.0);  // no recording: dropped
  {
    TransferSpanRecording rec;
    EXPECT_TRUE(recording_transfer_spans());
    note_transfer_span(TracedTransfer::moe_dispatch, 3.0, 4.0);
    std::thread([] { note_transfer_span(TracedTransfer::moe_combine, 3.5, 5.0); }).join();
    const std::vector<TransferSpan> spans = rec.take();
    ASSERT_EQ(spans.size(), 2u);
    EXPECT_EQ(spans[0].what, TracedTransfer::moe_dispatch);
    EXPECT_EQ(spans[0].start, 3.0);
    EXPECT_EQ(spans[1].what, TracedTransfer::moe_combine);
    EXPECT_EQ(spans[1].end, 5.0);
    EXPECT_TRUE(rec.take().empty());  // taken once
    try {
      TransferSpanRecording second;
      ADD_FAILURE() << "two recordings at once";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("a second recording"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(recording_transfer_spans());
  EXPECT_STREQ(traced_transfer_name(TracedTransfer::moe_combine), "moe combine all_to_all");
  const double before = steady_seconds(), after = steady_seconds();  // in this order
  EXPECT_LE(before, after);
}

}  // namespace
}  // namespace tessel
