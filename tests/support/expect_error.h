#pragma once
// Shared by every test suite: run a callable that must throw exception type E
// and return its message, so a test can check both the type and the text
// (shared/docs/style.md: every validation path has a bad-input test that
// checks the exception type and the message).
#include <gtest/gtest.h>

#include <exception>
#include <string>

namespace protondose::testing {

/// Calls f(); returns the message of the E it throws. Records a test failure
/// (and returns "") when f throws another type or nothing.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception thrown";
  return "";
}

}  // namespace protondose::testing
