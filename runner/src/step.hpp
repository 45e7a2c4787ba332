// The result of one setup step in the child between clone and exec: no allocation, no
// exceptions; a failure names the step and keeps errno so the parent can say what broke.
#pragma once

#include <cerrno>

namespace sluice::runner::detail {

struct StepResult {
  const char* step = nullptr;  // nullptr: success; else a static string naming the step
  int err = 0;                 // errno of the failing call
  explicit operator bool() const { return step == nullptr; }
};

inline StepResult stepOk() { return {}; }
inline StepResult stepFail(const char* step) { return {step, errno}; }
inline StepResult stepFail(const char* step, int err) { return {step, err}; }

}  // namespace sluice::runner::detail
