#include "protondose/core/host_timeline.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>

namespace pd = protondose;

// The record is process-wide: each test starts it and stops it.

TEST(HostTimeline, RecordsNothingWhenOff) {
  pd::HostTimeline::start();
  pd::HostTimeline::stop();
  EXPECT_FALSE(pd::HostTimeline::enabled());
  pd::HostTimeline::mark("after stop");
  EXPECT_TRUE(pd::HostTimeline::marks().empty());
}

TEST(HostTimeline, RecordsMarksInOrderWithTimesAndThreads) {
  pd::HostTimeline::start();
  EXPECT_TRUE(pd::HostTimeline::enabled());
  pd::HostTimeline::mark("first");
  std::thread([] { pd::HostTimeline::mark("other thread"); }).join();
  pd::HostTimeline::mark("last");
  pd::HostTimeline::stop();
  std::size_t dropped = 1;
  const auto marks = pd::HostTimeline::marks(&dropped);
  ASSERT_EQ(marks.size(), 3u);
  EXPECT_EQ(dropped, 0u);
  EXPECT_EQ(std::string(marks[0].what), "first");
  EXPECT_EQ(std::string(marks[1].what), "other thread");
  EXPECT_EQ(std::string(marks[2].what), "last");
  EXPECT_GE(marks[0].us, 0.0);
  EXPECT_LE(marks[0].us, marks[1].us);
  EXPECT_LE(marks[1].us, marks[2].us);
  EXPECT_EQ(marks[0].thread, 0);
  EXPECT_EQ(marks[1].thread, 1);
  EXPECT_EQ(marks[2].thread, 0);
}

TEST(HostTimeline, StartClearsTheRecordAndRenumbersTheThreads) {
  pd::HostTimeline::start();
  std::thread([] { pd::HostTimeline::mark("a thread first"); }).join();
  pd::HostTimeline::mark("then this one");
  pd::HostTimeline::start();
  pd::HostTimeline::mark("after the restart");
  pd::HostTimeline::stop();
  const auto marks = pd::HostTimeline::marks();
  ASSERT_EQ(marks.size(), 1u);
  EXPECT_EQ(std::string(marks[0].what), "after the restart");
  EXPECT_EQ(marks[0].thread, 0);  // this thread was 1 before the restart
}

TEST(HostTimeline, CountsTheMarksPastItsCapacityAsDropped) {
  pd::HostTimeline::start();
  for (std::size_t i = 0; i < pd::kHostTimelineCapacity + 5; ++i) pd::HostTimeline::mark("many");
  pd::HostTimeline::stop();
  std::size_t dropped = 0;
  EXPECT_EQ(pd::HostTimeline::marks(&dropped).size(), pd::kHostTimelineCapacity);
  EXPECT_EQ(dropped, 5u);
}

// A device's marks (a GPU executor's timing events placed on the host clock)
// keep the time they are given and carry kDeviceThread; off, nothing is kept
// and now_us reads 0.
TEST(HostTimeline, DeviceMarksKeepTheirTimeAndTheDeviceThread) {
  pd::HostTimeline::start();
  pd::HostTimeline::mark("host");
  const double now = pd::HostTimeline::now_us();
  EXPECT_GE(now, pd::HostTimeline::marks().front().us);
  pd::HostTimeline::mark_at("device", now + 123.5);
  pd::HostTimeline::stop();
  pd::HostTimeline::mark_at("after the stop", 1.0);
  EXPECT_EQ(pd::HostTimeline::now_us(), 0.0);
  const auto marks = pd::HostTimeline::marks();
  ASSERT_EQ(marks.size(), 2u);
  EXPECT_EQ(std::string(marks[1].what), "device");
  EXPECT_EQ(marks[1].us, now + 123.5);
  EXPECT_EQ(marks[1].thread, pd::kDeviceThread);
  EXPECT_EQ(marks[0].thread, 0);
}
