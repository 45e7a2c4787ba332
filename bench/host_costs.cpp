// host_costs: what this machine charges for the three kernel operations every row of
// bench/run_all.sh's table is built on, so that tables from different machines can be read
// side by side. A sandbox start is mostly page faults and system calls, a proxied request
// mostly system calls and wake-ups; a machine where these cost several times more (a guest
// whose page tables the hypervisor shadows, say) moves the ratios, and not always for both
// peers alike (docs/benchmarks.md, "Reading a table from another machine").
//
//   page_fault_us  first write to a fresh anonymous page (one minor fault, the page zeroed)
//   syscall_us     a system call that does nothing (getppid through syscall(2))
//   wakeup_us      half a round trip between two processes over a pair of pipes: a write
//                  that wakes a sleeping reader, and its switch in
//
// Each is the median of 7 repetitions. Prints "KEY VALUE" lines (bench/lib.sh's result format).
// Usage: host_costs
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double microsSince(Clock::time_point t0, int n) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / n;
}

double pageFault() {
  constexpr int kPages = 2000;
  const long page = ::sysconf(_SC_PAGESIZE);
  void* m =
      ::mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return -1;
  auto* p = static_cast<volatile char*>(m);
  const auto t0 = Clock::now();
  for (int i = 0; i < kPages; ++i) p[i * page] = 1;
  const double us = microsSince(t0, kPages);
  ::munmap(m, kPages * page);
  return us;
}

double syscallCost() {
  constexpr int kCalls = 200000;
  const auto t0 = Clock::now();
  for (int i = 0; i < kCalls; ++i) ::syscall(SYS_getppid);
  return microsSince(t0, kCalls);
}

// A child echoes each byte back; the parent times kTrips round trips (two wake-ups each).
double wakeup() {
  constexpr int kTrips = 5000;
  int there[2], back[2];
  if (::pipe(there) != 0 || ::pipe(back) != 0) return -1;
  const pid_t child = ::fork();
  if (child < 0) return -1;
  if (child == 0) {
    ::close(there[1]);  // else its own copy keeps the pipe open: no end of file, no exit
    ::close(back[0]);
    char c;
    while (::read(there[0], &c, 1) == 1)
      if (::write(back[1], &c, 1) != 1) break;
    ::_exit(0);
  }
  ::close(there[0]);
  ::close(back[1]);
  char c = 'x';
  double us = -1;
  // One trip first, so that the child is running and waiting before the clock starts.
  if (::write(there[1], &c, 1) == 1 && ::read(back[0], &c, 1) == 1) {
    const auto t0 = Clock::now();
    int i = 0;
    for (; i < kTrips; ++i)
      if (::write(there[1], &c, 1) != 1 || ::read(back[0], &c, 1) != 1) break;
    if (i == kTrips) us = microsSince(t0, 2 * kTrips);
  }
  ::close(there[1]);
  ::close(back[0]);
  ::waitpid(child, nullptr, 0);
  return us;
}

double median(double (*f)()) {
  std::vector<double> v;
  for (int i = 0; i < 7; ++i) v.push_back(f());
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main() {
  const double fault = median(pageFault);
  const double call = median(syscallCost);
  const double wake = median(wakeup);
  if (fault < 0 || wake < 0) {
    std::fprintf(stderr, "host_costs: a probe failed\n");
    return 1;
  }
  std::printf("host.page_fault_us %.2f\nhost.syscall_us %.3f\nhost.wakeup_us %.2f\n", fault, call,
              wake);
  return 0;
}
