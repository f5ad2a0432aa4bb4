#pragma once
/// \file host_timeline.h
/// Host timeline marks: when the host threads of a computation reach the
/// points between its GPU stages (a launch queued, a read-back returned), in
/// µs from HostTimeline::start. For the engine's developers: the GPU
/// machines of this project have no Nsight Systems, and the water cube's
/// last milliseconds were host gaps that only such a timeline showed
/// (docs/benchmarks-engine.md). `protondose-engine-bench --timeline` prints
/// the marks of its last run.
///
/// Off by default: a mark is then one relaxed atomic load. The record is
/// process-wide and holds kHostTimelineCapacity marks; later ones are
/// counted, not stored.

#include <cstddef>
#include <vector>

namespace protondose {

inline constexpr std::size_t kHostTimelineCapacity = 4096;
/// HostTimelineMark::thread of the marks a device's events placed (mark_at).
inline constexpr int kDeviceThread = -1;

struct HostTimelineMark {
  double us;         ///< since HostTimeline::start
  const char* what;  ///< the caller's string literal
  int thread;        ///< 0, 1, … in the order threads first marked since start; kDeviceThread
};

class HostTimeline {
 public:
  /// Clears the record, restarts the clock and turns marking on.
  static void start();
  /// Turns marking off; the record stays.
  static void stop();
  static bool enabled();
  /// Records `what` (a string literal: only the pointer is kept) with the
  /// time and the calling thread, if marking is on.
  static void mark(const char* what);
  /// µs since start (0 when marking is off).
  static double now_us();
  /// Records `what` at `us` for a device (thread kDeviceThread): a GPU
  /// executor places the timing events of its streams on the host clock.
  static void mark_at(const char* what, double us);
  /// The marks since start, in the order they were taken, and how many did
  /// not fit (dropped).
  static std::vector<HostTimelineMark> marks(std::size_t* dropped = nullptr);
};

}  // namespace protondose
