// Whether this environment promises every capability the tests need (CI=true or
// SLUICE_REQUIRE_ISOLATION=1): then a missing one is a failure, never a silent skip. Shared by
// every test directory; it depends on nothing of sluice's.
#pragma once

#include <cstdlib>
#include <string>

inline bool isolationRequired() {
  const char* ci = std::getenv("CI");
  const char* req = std::getenv("SLUICE_REQUIRE_ISOLATION");
  return (ci && std::string(ci) == "true") || (req && std::string(req) == "1");
}
