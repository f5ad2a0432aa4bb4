#pragma once
// A value made once per key by whichever thread asks first, shared by every
// thread that asks for the same key: the others wait for it. The batch and
// robust workers use it to convert a CT once for all of their engines
// (DoseEngine::prepare depends only on the CT and options they share).

#include <future>
#include <map>
#include <memory>
#include <mutex>

namespace protondose::engine {

template <class Key, class Value>
class MadeOnce {
 public:
  /// The value of `key` for this `source` (compared by identity; an entry
  /// made from another source is replaced, and the source is kept alive with
  /// it). The first caller runs make() on its own thread; callers meanwhile
  /// wait, and get make()'s exception if it throws.
  template <class Make>
  Value get(const Key& key, const std::shared_ptr<const void>& source, Make&& make) {
    std::promise<Value> promise;
    std::shared_future<Value> value;
    bool mine = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = entries_.find(key);
      if (it == entries_.end() || it->second.source != source) {
        value = promise.get_future().share();
        entries_[key] = Entry{source, value};
        mine = true;
      } else {
        value = it->second.value;
      }
    }
    if (mine) {
      try {
        promise.set_value(make());
      } catch (...) {
        promise.set_exception(std::current_exception());
      }
    }
    return value.get();
  }

 private:
  struct Entry {
    std::shared_ptr<const void> source;
    std::shared_future<Value> value;
  };
  std::mutex mutex_;
  std::map<Key, Entry> entries_;
};

}  // namespace protondose::engine
