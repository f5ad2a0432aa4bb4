#pragma once
/// \file parallel.h
/// A minimal fork-join helper for the CPU backends: split [0, count) into
/// contiguous chunks, one per worker thread, and wait for all of them.

#include <cstddef>
#include <functional>

namespace protondose {

/// Number of worker threads the CPU paths use: PROTONDOSE_NUM_THREADS if set
/// (> 0), else std::thread::hardware_concurrency(), at least 1.
int default_thread_count();

/// Calls body(begin, end, worker) for disjoint chunks covering [0, count),
/// on up to `threads` threads (0 = default_thread_count()). The first
/// exception thrown by any chunk is rethrown after all chunks finished.
void parallel_for_chunks(std::size_t count, int threads,
                         const std::function<void(std::size_t begin, std::size_t end, int worker)>& body);

}  // namespace protondose
