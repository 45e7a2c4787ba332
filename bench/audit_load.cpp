// audit_load: writes connection rows into an audit store at a steady rate, the load that
// bench/audit_ship.sh ships into PostgreSQL.
//   audit_load DB ROWS [ROWS_PER_SECOND]   (0 or absent: as fast as the store takes them)
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "sluice/audit/store.hpp"
#include "sluice/base/clock.hpp"

namespace {

sluice::audit::ConnectionEvent connection(long n) {
  sluice::audit::ConnectionEvent c;
  c.id = "c-load-" + std::to_string(n);
  c.workflow = "load";
  c.policy_sha256 = std::string(64, 'a');
  c.ts_ms = sluice::base::nowMs();
  c.host = "pypi.org";
  c.port = 443;
  c.decision = sluice::audit::Decision::kAllow;
  c.rule_id = "pypi";
  c.reason = "allowed";
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: audit_load DB ROWS [ROWS_PER_SECOND]\n";
    return 2;
  }
  const long rows = std::atol(argv[2]);
  const long rate = argc > 3 ? std::atol(argv[3]) : 0;
  auto store = sluice::audit::Store::open(argv[1]);
  if (!store) {
    std::cerr << "audit_load: " << store.error().message << "\n";
    return 2;
  }
  // Paced in 10 ms ticks: each tick writes what the rate owes since the start.
  const auto start = std::chrono::steady_clock::now();
  long written = 0;
  while (written < rows) {
    long due = rows;
    if (rate > 0) {
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - start)
                          .count();
      due = std::min(rows, rate * ms / 1000 + 1);
    }
    for (; written < due; ++written) (*store)->recordConnection(connection(written));
    if (rate > 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (auto r = (*store)->flush(); !r) {
    std::cerr << "audit_load: " << r.error().message << "\n";
    return 2;
  }
  return 0;
}
