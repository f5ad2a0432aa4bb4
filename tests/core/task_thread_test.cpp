#include "protondose/core/task_thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace pd = protondose;

TEST(TaskThread, RunsTasksInOrderOnOneOtherThreadAndReturnsTheirResults) {
  pd::TaskThread worker;
  std::vector<int> order;  // touched by the worker only, read after the last future
  std::vector<std::future<std::thread::id>> ids;
  for (int i = 0; i < 50; ++i)
    ids.push_back(worker.run([&order, i] {
      order.push_back(i);
      return std::this_thread::get_id();
    }));
  const std::thread::id first = ids.front().get();
  EXPECT_NE(first, std::this_thread::get_id());
  for (std::size_t i = 1; i < ids.size(); ++i) EXPECT_EQ(ids[i].get(), first) << "task " << i;
  ASSERT_EQ(order.size(), 50u);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_EQ(worker.run([] { return std::string("done"); }).get(), "done");
}

TEST(TaskThread, AnExceptionReachesItsFutureAndTheThreadGoesOn) {
  pd::TaskThread worker;
  auto failed = worker.run([]() -> int { throw std::runtime_error("task failed"); });
  EXPECT_THROW(failed.get(), std::runtime_error);
  EXPECT_EQ(worker.run([] { return 7; }).get(), 7);
}

TEST(TaskThread, TheDestructorRunsWhatIsStillQueued) {
  std::atomic<int> ran{0};
  {
    pd::TaskThread worker;
    for (int i = 0; i < 20; ++i)
      worker.run([&ran] {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        ++ran;
      });
  }
  EXPECT_EQ(ran.load(), 20);
}

TEST(TaskThread, TwoThreadsRunTheirTasksAtTheSameTime) {
  // The GPU executor keeps one for the plan dose's host volume and one for
  // the halo: a long task on one must not hold the other's back.
  pd::TaskThread slow, fast;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto blocked = slow.run([released] { released.wait(); return 1; });
  EXPECT_EQ(fast.run([] { return 2; }).get(), 2);  // would hang if the two shared a thread
  release.set_value();
  EXPECT_EQ(blocked.get(), 1);
}
