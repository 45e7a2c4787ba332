// The receipt's list of inputs: every regular file of RunSpec::inputs with its sha256, hashed on
// a thread of its own that starts with the run, so the sandbox's start-up does not wait for it
// (docs/sandbox.md "Inputs").
#pragma once

#include <stop_token>
#include <thread>
#include <vector>

#include "sluice/runner/sandbox.hpp"

namespace sluice::runner::detail {

/// What the digest thread found.
struct InputDigests {
  std::vector<InputFile> files;  // sorted by sandbox path
  bool truncated = false;        // more than kMaxInputFiles regular files
};

/// Walks and hashes `inputs` now, on the calling thread (the digest thread's body; tests).
/// Directories are walked without following symlinks; only regular files are listed.
/// Returns early, with what it has, once `stop` is requested.
InputDigests digestInputs(const std::vector<Input>& inputs, std::stop_token stop = {});

/// Runs digestInputs() on a thread of its own from construction (none for no inputs) until
/// take() joins it. Destroyed untaken (a run that failed to start), it asks the thread to stop
/// and joins it.
class InputDigester {
 public:
  explicit InputDigester(const std::vector<Input>& inputs);
  /// Waits for the thread and returns its result (empty without inputs). Call once.
  InputDigests take();

 private:
  InputDigests result_;
  std::jthread thread_;  // last: joined (after a stop request) before result_ goes away
};

}  // namespace sluice::runner::detail
