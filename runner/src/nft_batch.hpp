// An nftables transaction written directly as netlink messages (NETLINK_NETFILTER): tables,
// base chains and rules built from expressions, sent as one batch (NFNL_MSG_BATCH_BEGIN ..
// END) and checked message by message against the kernel's acks.
//
// Why not libnftables: it parses a ruleset text, evaluates it and caches the kernel's state
// first (about 0.6 ms per sandbox on a busy 2-core machine, see docs/sandbox.md); sluice's
// ruleset is fixed, so its netlink form is written once here. Why not libnftnl/libmnl: for the
// few expressions needed they would only wrap the same attribute writes, at the cost of two
// more libraries to link.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/base/error.hpp"

namespace sluice::runner::detail {

/// Why a batch failed (kIo): `where` is the object the kernel refused ("table inet sluice",
/// "rule 3 in chain filter_output (reject with tcp reset)"; "batch" when the kernel refused the
/// batch as a whole, e.g. EPERM without CAP_NET_ADMIN), `sys_errno` its errno, and the message
/// "<object>: <strerror> (errno N)".
base::Error nftError(std::string object, int err);

/// The expressions of one rule, in order. Registers are the 16-byte NFT_REG_1.. (0 = verdict).
class NftRule {
 public:
  explicit NftRule(std::string description) : description_(std::move(description)) {}
  NftRule& meta(std::uint32_t key, std::uint32_t dreg);
  NftRule& payload(std::uint32_t base, std::uint32_t offset, std::uint32_t len, std::uint32_t dreg);
  NftRule& cmp(std::uint32_t op, std::uint32_t sreg, std::string_view data);
  NftRule& immediate(std::uint32_t dreg, std::string_view data);
  NftRule& verdict(std::int32_t code);  // NF_ACCEPT, NF_DROP, NFT_CONTINUE...
  NftRule& redirect(std::uint32_t proto_reg, std::uint32_t flags);
  NftRule& reject(std::uint32_t type, std::uint8_t code);
  /// `log group G snaplen N`: a copy of the packet (its first `snaplen` bytes from the network
  /// header) to nfnetlink_log group `group` of the namespace; the rule goes on.
  NftRule& log(std::uint16_t group, std::uint32_t snaplen);
  /// Any expression by name with raw attributes already encoded (tests: an unknown one).
  NftRule& raw(std::string_view name, std::string_view attributes);

  const std::string& description() const { return description_; }
  const std::string& encoded() const { return exprs_; }  // NFTA_LIST_ELEM attributes

 private:
  std::string description_;
  std::string exprs_;
};

/// One transaction: add objects in order, then commit() on a NETLINK_NETFILTER socket of the
/// network namespace they belong in. Nothing is applied unless every object is accepted.
class NftBatch {
 public:
  NftBatch();
  /// NEWTABLE with NLM_F_EXCL: an existing table of that name fails the batch (EEXIST).
  void addTable(std::uint8_t family, std::string_view table);
  void addBaseChain(std::uint8_t family, std::string_view table, std::string_view chain,
                    std::string_view type, std::uint32_t hook, std::int32_t priority,
                    std::uint32_t policy);
  void addRule(std::uint8_t family, std::string_view table, std::string_view chain,
               const NftRule& rule);
  /// Sends the batch and reads one ack per object (at most 1 s). The first refused object
  /// (in batch order) is the error.
  base::Result<void> commit(int netlink_fd);

  std::size_t objects() const { return objects_.size(); }

 private:
  std::uint32_t begin(std::uint16_t type, std::uint16_t flags, std::uint8_t family,
                      std::string object);
  void end(std::uint32_t at);

  std::string buf_;
  std::uint32_t seq_ = 0;
  std::vector<std::string> objects_;  // by seq - first_seq_; [0] is the batch itself
  std::uint32_t first_seq_ = 0;
  std::size_t rules_ = 0;
};

/// Opens a NETLINK_NETFILTER socket in the calling thread's network namespace.
base::Result<int> openNftSocket();

}  // namespace sluice::runner::detail
