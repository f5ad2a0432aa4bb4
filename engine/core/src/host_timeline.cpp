#include "protondose/core/host_timeline.h"

#include <array>
#include <atomic>
#include <chrono>

namespace protondose {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_enabled{false};
/// Bumped by every start: a thread's ordinal is renewed when it is stale.
std::atomic<int> g_generation{0};
std::atomic<int> g_next_thread{0};
std::atomic<std::size_t> g_count{0};
std::array<HostTimelineMark, kHostTimelineCapacity> g_marks;
/// Written by start() only, before marking is turned on (the release store
/// of g_enabled publishes it to the marking threads' acquire loads).
Clock::time_point g_start;

int thread_ordinal() {
  thread_local int generation = -1;
  thread_local int ordinal = 0;
  const int now = g_generation.load(std::memory_order_acquire);
  if (generation != now) {
    generation = now;
    ordinal = g_next_thread.fetch_add(1, std::memory_order_relaxed);
  }
  return ordinal;
}

}  // namespace

void HostTimeline::start() {
  g_enabled.store(false, std::memory_order_release);
  g_count.store(0, std::memory_order_relaxed);
  g_next_thread.store(0, std::memory_order_relaxed);
  g_generation.fetch_add(1, std::memory_order_acq_rel);
  g_start = Clock::now();
  g_enabled.store(true, std::memory_order_release);
}

void HostTimeline::stop() { g_enabled.store(false, std::memory_order_release); }

bool HostTimeline::enabled() { return g_enabled.load(std::memory_order_relaxed); }

void HostTimeline::mark(const char* what) {
  if (!g_enabled.load(std::memory_order_acquire)) return;
  const Clock::time_point now = Clock::now();
  const std::size_t i = g_count.fetch_add(1, std::memory_order_acq_rel);
  if (i >= kHostTimelineCapacity) return;
  g_marks[i] = {std::chrono::duration<double, std::micro>(now - g_start).count(), what, thread_ordinal()};
}

double HostTimeline::now_us() {
  if (!g_enabled.load(std::memory_order_acquire)) return 0.0;
  return std::chrono::duration<double, std::micro>(Clock::now() - g_start).count();
}

void HostTimeline::mark_at(const char* what, double us) {
  if (!g_enabled.load(std::memory_order_acquire)) return;
  const std::size_t i = g_count.fetch_add(1, std::memory_order_acq_rel);
  if (i >= kHostTimelineCapacity) return;
  g_marks[i] = {us, what, kDeviceThread};
}

std::vector<HostTimelineMark> HostTimeline::marks(std::size_t* dropped) {
  const std::size_t n = g_count.load(std::memory_order_acquire);
  const std::size_t kept = n < kHostTimelineCapacity ? n : kHostTimelineCapacity;
  if (dropped) *dropped = n - kept;
  return std::vector<HostTimelineMark>(g_marks.begin(), g_marks.begin() + static_cast<std::ptrdiff_t>(kept));
}

}  // namespace protondose
