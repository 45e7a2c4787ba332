// An upstream for end-to-end tests that must not be on the host's loopback: a network
// namespace the test makes, reached over a veth pair (host side SUBNET.1, namespace side
// SUBNET.2), running a Python server. Nothing of the host changes but the veth pair and the
// namespace, both removed by the destructor (and by `sluice gc`-style names if a test dies:
// they carry the test process's pid).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "proc_scan.hpp"

namespace sluice::testing {

class NetnsUpstream {
 public:
  NetnsUpstream() = default;
  NetnsUpstream(const NetnsUpstream&) = delete;
  NetnsUpstream& operator=(const NetnsUpstream&) = delete;
  ~NetnsUpstream() { stop(); }

  /// Makes namespace `ns` with the veth pair named from `tag` (a few letters), addresses
  /// SUBNET.1/24 outside and SUBNET.2/24 inside, starts `python3 ARGS...` in it and waits until
  /// `probe_url` (fetched with curl from the host) answers with a body containing `expect`.
  /// Returns "" on success, else what failed.
  std::string start(const std::string& ns, const std::string& tag, const std::string& subnet,
                    const std::vector<std::string>& python_args, const std::string& probe_url,
                    const std::string& expect) {
    ns_ = ns;
    const std::string host_if = tag + "h" + std::to_string(::getpid() % 100000);
    const std::string ns_if = tag + "n" + std::to_string(::getpid() % 100000);
    auto [rc, out] = shellOutput(
        "set -e; ip netns add " + ns + "; ip link add " + host_if + " type veth peer name " +
        ns_if + "; ip link set " + ns_if + " netns " + ns + "; ip addr add " + subnet +
        ".1/24 dev " + host_if + "; ip link set " + host_if + " up; ip netns exec " + ns +
        " ip addr add " + subnet + ".2/24 dev " + ns_if + "; ip netns exec " + ns +
        " ip link set " + ns_if + " up; ip netns exec " + ns + " ip link set lo up");
    if (rc != 0) return "cannot make the upstream's namespace: " + out;
    host_if_ = host_if;
    std::vector<std::string> argv = {"ip", "netns", "exec", ns, "/usr/bin/python3"};
    argv.insert(argv.end(), python_args.begin(), python_args.end());
    server_ = ::fork();
    if (server_ == 0) {
      std::vector<char*> cargv;
      for (auto& a : argv) cargv.push_back(a.data());
      cargv.push_back(nullptr);
      ::execvp("ip", cargv.data());
      ::_exit(99);
    }
    for (int i = 0; i < 100; ++i) {
      if (shellOutput("curl -s --max-time 1 " + probe_url).second.find(expect) != std::string::npos)
        return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return "the upstream did not start (" + probe_url + ")";
  }

  void stop() {
    if (server_ > 0) {
      ::kill(server_, SIGTERM);
      ::waitpid(server_, nullptr, 0);
      server_ = -1;
    }
    if (!host_if_.empty()) shellOutput("ip link del " + host_if_ + "; ip netns del " + ns_);
    host_if_.clear();
  }

  const std::string& ns() const { return ns_; }

 private:
  std::string ns_, host_if_;
  pid_t server_ = -1;
};

}  // namespace sluice::testing
