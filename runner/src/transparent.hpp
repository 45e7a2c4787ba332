// Transparent capture, the sandbox's side (DESIGN.md "Transparent capture and DNS"): in the
// sandbox's own network namespace only, a default route via `lo` (IPv4 and IPv6), the nftables
// table `inet sluice` (TCP to any non-loopback address redirected to the proxy port; UDP, ICMP
// and everything else to a non-loopback address rejected), the proxy's second listener on
// [::1]:3128 and, when the caller serves DNS, a UDP and a TCP socket on 127.0.0.53:53.
//
// Done by sluice (the parent), not by init: building the rules' netlink batch (nft_batch.hpp)
// allocates, and init may be a copy of a multi-threaded process. setns(CLONE_NEWNET) switches
// only the calling thread, so the work runs on a thread of its own that ends with it; it
// overlaps the plan's building (prepared sandboxes), init's set-up and the cgroup attach. Sockets
// keep the namespace they were made in, so the fds work from anywhere after.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <future>

#include "fd.hpp"
#include "sluice/runner/sandbox.hpp"

namespace sluice::runner::detail {

/// How much of each rejected packet the kernel copies to the blocked-attempt log: the IP
/// header with options or IPv6 extension headers and the UDP/TCP/ICMP header.
inline constexpr std::uint32_t kBlockedLogSnaplen = 128;

/// sluice's DNS server inside every sandbox with network_proxy (DESIGN.md).
inline constexpr char kDnsAddress[] = "127.0.0.53";
inline constexpr std::uint16_t kDnsPort = 53;

/// The sockets made in the sandbox's namespace, for the caller's hooks.
struct CaptureSockets {
  Fd listener6;              // TCP listening on [::1]:3128 (IPV6_V6ONLY)
  Fd dns_udp;                // UDP bound to 127.0.0.53:53 (only when asked)
  Fd dns_tcp;                // TCP listening on 127.0.0.53:53 (only when asked)
  Fd blocked_log;            // nfnetlink_log, group kBlockedLogGroup (only with the DNS ones)
  std::int64_t took_us = 0;  // the set-up thread's own time (SLUICE_TIMING)
};

using CaptureResult = base::Result<CaptureSockets>;

/// Starts setting up transparent capture in the network namespace of `init` (the sandbox's
/// init, in the sandbox's namespace from birth) on a thread of its own; get() the future before
/// the program may start. Refuses (in the future's result) a namespace that is sluice's own,
/// so a rule can never land on the host. `dns`: also make the DNS sockets.
std::future<CaptureResult> startCapture(pid_t init, bool dns);

/// The same in the network namespace `netns` (a prepared sandbox's, which its helper sent),
/// with the same refusal of sluice's own.
std::future<CaptureResult> startCaptureIn(Fd netns, bool dns);

/// Installs table inet sluice (the capture rules) in the calling thread's network namespace:
/// one nftables netlink batch, all or nothing. Fails (step "nftables rules", the kernel's
/// errno and the object it refused) if the table exists already.
base::Result<void> installCaptureRules();

}  // namespace sluice::runner::detail
