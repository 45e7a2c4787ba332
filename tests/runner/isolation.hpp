// Shared guard for tests that need root, namespaces and cgroups: skip when missing, but fail
// when the environment promises isolation (CI=true or SLUICE_REQUIRE_ISOLATION=1).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "isolation_required.hpp"
#include "sluice/runner/sandbox.hpp"

// An execution id no other sandbox of this test process (or of a parallel one) uses.
inline std::string uniqueId(const char* tag) {
  static std::atomic<int> n{0};
  return std::string("t-") + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

#define REQUIRE_SANDBOX()                                                              \
  do {                                                                                 \
    std::string why_;                                                                  \
    if (!sluice::runner::sandboxSupported(&why_)) {                                    \
      if (isolationRequired()) FAIL() << "sandbox required but unavailable: " << why_; \
      GTEST_SKIP() << "sandbox unavailable: " << why_;                                 \
    }                                                                                  \
  } while (0)

// Root only (fixtures that make network namespaces or veth pairs in SetUp), with the same
// skip-or-fail rule.
#define REQUIRE_ROOT()                                 \
  do {                                                 \
    if (::geteuid() != 0) {                            \
      if (isolationRequired()) FAIL() << "needs root"; \
      GTEST_SKIP() << "needs root";                    \
    }                                                  \
  } while (0)
