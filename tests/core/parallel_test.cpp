#include "protondose/core/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace protondose {
namespace {

TEST(ParallelForChunks, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> hits(1001);
    parallel_for_chunks(hits.size(), threads, [&](std::size_t b, std::size_t e, int) {
      for (std::size_t i = b; i < e; ++i) hits[i]++;
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "threads=" << threads;
  }
}

TEST(ParallelForChunks, RethrowsAWorkersException) {
  EXPECT_THROW(parallel_for_chunks(10, 4,
                                   [](std::size_t b, std::size_t, int) {
                                     if (b > 0) throw std::runtime_error("chunk failed");
                                   }),
               std::runtime_error);
}

}  // namespace
}  // namespace protondose
