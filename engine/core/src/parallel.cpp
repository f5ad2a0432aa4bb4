#include "protondose/core/parallel.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace protondose {

int default_thread_count() {
  if (const char* env = std::getenv("PROTONDOSE_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for_chunks(std::size_t count, int threads,
                         const std::function<void(std::size_t, std::size_t, int)>& body) {
  if (count == 0) return;
  if (threads <= 0) threads = default_thread_count();
  const std::size_t workers = std::min<std::size_t>(static_cast<std::size_t>(threads), count);
  if (workers == 1) {
    body(0, count, 0);
    return;
  }
  std::exception_ptr first_error;
  std::mutex error_mutex;
  std::vector<std::thread> pool;
  pool.reserve(workers);
  for (std::size_t w = 0; w < workers; ++w) {
    const std::size_t begin = count * w / workers;
    const std::size_t end = count * (w + 1) / workers;
    pool.emplace_back([&, begin, end, w] {
      try {
        body(begin, end, static_cast<int>(w));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    });
  }
  for (auto& t : pool) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace protondose
