// MadeOnce (engine/src/made_once.h): the CT conversion shared by batch and
// robust workers — made once per key and source, waited for by the others,
// its exception handed to every caller.
#include "made_once.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace pe = protondose::engine;

TEST(MadeOnce, EightThreadsAskingForOneKeyMakeItOnceAndAllGetIt) {
  pe::MadeOnce<int, int> once;
  std::atomic<int> made{0};
  std::vector<int> got(8, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      got[static_cast<std::size_t>(t)] = once.get(7, nullptr, [&] {
        ++made;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the others arrive meanwhile
        return 42;
      });
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(made.load(), 1);
  for (int v : got) EXPECT_EQ(v, 42);
  EXPECT_EQ(once.get(8, nullptr, [] { return 5; }), 5);  // another key is made anew
}

TEST(MadeOnce, ANewSourceReplacesTheEntryAndTheSameSourceReusesIt) {
  pe::MadeOnce<std::string, int> once;
  auto first = std::make_shared<int>(1), second = std::make_shared<int>(2);
  int calls = 0;
  EXPECT_EQ(once.get("cfg", first, [&] { return ++calls; }), 1);
  EXPECT_EQ(once.get("cfg", first, [&] { return ++calls; }), 1);
  EXPECT_EQ(once.get("cfg", second, [&] { return ++calls; }), 2);
  EXPECT_EQ(calls, 2);
}

TEST(MadeOnce, EveryCallerOfAFailedMakeGetsItsException) {
  pe::MadeOnce<int, int> once;
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      once.get(1, nullptr, []() -> int { throw std::runtime_error("HU 5000 outside the curve"); });
      FAIL() << "expected the make's exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "HU 5000 outside the curve");
    }
  }
}
