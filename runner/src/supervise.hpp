// Supervising a running program, the parent's side: feeds its stdin, relays and captures its
// output, reads setup failures and init's final report, and stops it on timeout, on the CPU
// limit, on requestStop() or on the run's own stop fd. Used for `sluice run` and session execs.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "child.hpp"
#include "fd.hpp"
#include "launch.hpp"
#include "sluice/runner/cgroup.hpp"
#include "sluice/runner/sandbox.hpp"

namespace sluice::runner::detail {

enum class StopReason : std::uint8_t { kNone, kTimeout, kCpu, kRequest };

/// What to watch. The fds are the parent's ends; supervise() reads them until EOF.
struct SuperviseSpec {
  int out_r = -1, errs_r = -1;  // the program's stdout and stderr
  int err_r = -1;               // ChildMessage on a setup failure; EOF once the program execs
  int rep_r = -1;               // init's InitReport
  Fd* stdin_w = nullptr;        // fed `stdin_data`, then closed (null: nothing to feed)
  std::string_view stdin_data;
  pid_t init = -1;   // SIGUSR1: init kills the program and everything it started
  int stop_seq = 0;  // carried by that SIGUSR1: which program it is for (a session's exec)
  const Cgroup* cgroup = nullptr;         // sampled every 100 ms (CPU total, pids)
  std::uint64_t cpu_base_us = 0;          // the cgroup's CPU use before this program started
  Clock::time_point started;              // the timeout counts from here
  std::chrono::milliseconds timeout{0};   // 0: none
  std::chrono::milliseconds cpu_time{0};  // 0: none
  std::uint64_t output_limit = 0;         // captured per stream; 0: all
  const OutputSink* live = nullptr;
  int stop_fd = -1;          // readable: stop (RunHooks::stop_fd)
  std::string_view program;  // argv[0], for "command not found" messages
};

struct Supervised {
  StopReason stop = StopReason::kNone;
  int stop_signal = 0;  // kRequest: the signal requestStop() named, SIGTERM for stop_fd
  bool have_report = false;
  InitReport report;
  std::optional<base::Error> child_error;
  std::uint64_t pids_sampled = 0;  // the highest pids.current seen
  StreamCapture out, err;
  Clock::time_point exec_at = Clock::time_point::max();  // when the error pipe closed
};

/// Runs until the program's output streams and init's report pipe are all closed.
Supervised supervise(const SuperviseSpec& spec);

}  // namespace sluice::runner::detail
