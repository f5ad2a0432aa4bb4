#pragma once
/// \file task_thread.h
/// One persistent thread that runs the tasks handed to it, in order.
///
/// std::async(std::launch::async, …) starts a thread per call; on the GPU
/// machines' hosts that took ~50–100 µs of the calling thread (the GPU
/// executor's host volume for the plan dose, started with the plan). A thread
/// kept for the owner's lifetime takes a task in a few µs.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>

namespace protondose {

class TaskThread {
 public:
  TaskThread() : thread_([this] { loop(); }) {}
  TaskThread(const TaskThread&) = delete;
  TaskThread& operator=(const TaskThread&) = delete;
  /// Runs the tasks still queued, then joins.
  ~TaskThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }

  /// Queues `task`; its result, or the exception it throws, arrives through
  /// the future.
  template <class F>
  std::future<std::invoke_result_t<F&>> run(F task) {
    using R = std::invoke_result_t<F&>;
    // std::function needs a copyable target; the packaged task is not.
    auto packaged = std::make_shared<std::packaged_task<R()>>(std::move(task));
    std::future<R> result = packaged->get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.emplace_back([packaged] { (*packaged)(); });
    }
    wake_.notify_one();
    return result;
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();  // a packaged task: what it throws goes to its future
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the members above exist
};

/// A future's value, polled with a yield between polls rather than slept
/// on: for a result the GPU waits for, where a sleeping thread woke 25–45 µs
/// after it was set (H100 hosts; and a std::async future joins its thread
/// in get()). Rethrows what the task threw.
template <class T>
T get_polled(std::future<T>& f) {
  while (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) std::this_thread::yield();
  return f.get();
}

/// get_polled for at most `poll_limit`, then a sleeping wait: for a thread
/// woken ahead of its job, which must not spin on if the job is late.
template <class T>
T get_polled(std::future<T>& f, std::chrono::microseconds poll_limit) {
  const auto give_up = std::chrono::steady_clock::now() + poll_limit;
  while (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
    if (std::chrono::steady_clock::now() > give_up) {
      f.wait();
      break;
    }
    std::this_thread::yield();
  }
  return f.get();
}

}  // namespace protondose
