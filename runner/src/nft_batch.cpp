// nftables netlink batches (see nft_batch.hpp). Attribute layout: linux/netfilter/nf_tables.h
// (every integer attribute big-endian, strings NUL-terminated, as the kernel's policies expect).
#include "nft_batch.hpp"

#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

namespace sluice::runner::detail {
namespace {

void putAttr(std::string& b, std::uint16_t type, std::string_view data) {
  const nlattr a{static_cast<std::uint16_t>(NLA_HDRLEN + data.size()), type};
  b.append(reinterpret_cast<const char*>(&a), sizeof a);
  b.append(data);
  b.append(NLA_ALIGN(data.size()) - data.size(), '\0');
}

void putU32(std::string& b, std::uint16_t type, std::uint32_t v) {
  const std::uint32_t be = htonl(v);
  putAttr(b, type, {reinterpret_cast<const char*>(&be), sizeof be});
}

void putString(std::string& b, std::uint16_t type, std::string_view s) {
  std::string z(s);
  z.push_back('\0');
  putAttr(b, type, z);
}

std::size_t nestBegin(std::string& b, std::uint16_t type) {
  const std::size_t at = b.size();
  const nlattr a{0, static_cast<std::uint16_t>(type | NLA_F_NESTED)};
  b.append(reinterpret_cast<const char*>(&a), sizeof a);
  return at;
}

void nestEnd(std::string& b, std::size_t at) {
  const auto len = static_cast<std::uint16_t>(b.size() - at);
  std::memcpy(b.data() + at + offsetof(nlattr, nla_len), &len, sizeof len);
}

// One NFTA_LIST_ELEM: the expression's name and its NFTA_EXPR_DATA.
void putExpr(std::string& out, std::string_view name, std::string_view data) {
  const std::size_t elem = nestBegin(out, NFTA_LIST_ELEM);
  putString(out, NFTA_EXPR_NAME, name);
  const std::size_t d = nestBegin(out, NFTA_EXPR_DATA);
  out.append(data);
  nestEnd(out, d);
  nestEnd(out, elem);
}

// An immediate expression: register dreg loaded with NFTA_IMMEDIATE_DATA, whose NFTA_DATA_*
// attribute (a value or a verdict) is already encoded in `data`.
void putImmediate(std::string& out, std::uint32_t dreg, std::string_view data) {
  std::string d;
  putU32(d, NFTA_IMMEDIATE_DREG, dreg);
  const std::size_t n = nestBegin(d, NFTA_IMMEDIATE_DATA);
  d.append(data);
  nestEnd(d, n);
  putExpr(out, "immediate", d);
}

const char* familyName(std::uint8_t family) {
  switch (family) {
    case NFPROTO_INET:
      return "inet";
    case NFPROTO_IPV4:
      return "ip";
    case NFPROTO_IPV6:
      return "ip6";
    default:
      return "?";
  }
}

}  // namespace

base::Error nftError(std::string object, int err) {
  std::string message = object + ": " + std::strerror(err) + " (errno " + std::to_string(err) + ")";
  return base::Error{base::Code::kIo, std::move(message), std::move(object), err};
}

NftRule& NftRule::meta(std::uint32_t key, std::uint32_t dreg) {
  std::string d;
  putU32(d, NFTA_META_KEY, key);
  putU32(d, NFTA_META_DREG, dreg);
  putExpr(exprs_, "meta", d);
  return *this;
}

NftRule& NftRule::payload(std::uint32_t base, std::uint32_t offset, std::uint32_t len,
                          std::uint32_t dreg) {
  std::string d;
  putU32(d, NFTA_PAYLOAD_DREG, dreg);
  putU32(d, NFTA_PAYLOAD_BASE, base);
  putU32(d, NFTA_PAYLOAD_OFFSET, offset);
  putU32(d, NFTA_PAYLOAD_LEN, len);
  putExpr(exprs_, "payload", d);
  return *this;
}

NftRule& NftRule::cmp(std::uint32_t op, std::uint32_t sreg, std::string_view data) {
  std::string d;
  putU32(d, NFTA_CMP_SREG, sreg);
  putU32(d, NFTA_CMP_OP, op);
  const std::size_t n = nestBegin(d, NFTA_CMP_DATA);
  putAttr(d, NFTA_DATA_VALUE, data);
  nestEnd(d, n);
  putExpr(exprs_, "cmp", d);
  return *this;
}

NftRule& NftRule::immediate(std::uint32_t dreg, std::string_view data) {
  std::string value;
  putAttr(value, NFTA_DATA_VALUE, data);
  putImmediate(exprs_, dreg, value);
  return *this;
}

NftRule& NftRule::verdict(std::int32_t code) {
  std::string v;
  const std::size_t n = nestBegin(v, NFTA_DATA_VERDICT);
  putU32(v, NFTA_VERDICT_CODE, static_cast<std::uint32_t>(code));
  nestEnd(v, n);
  putImmediate(exprs_, NFT_REG_VERDICT, v);
  return *this;
}

NftRule& NftRule::redirect(std::uint32_t proto_reg, std::uint32_t flags) {
  std::string d;
  putU32(d, NFTA_REDIR_REG_PROTO_MIN, proto_reg);
  putU32(d, NFTA_REDIR_FLAGS, flags);
  putExpr(exprs_, "redir", d);
  return *this;
}

NftRule& NftRule::reject(std::uint32_t type, std::uint8_t code) {
  std::string d;
  putU32(d, NFTA_REJECT_TYPE, type);
  putAttr(d, NFTA_REJECT_ICMP_CODE, {reinterpret_cast<const char*>(&code), 1});
  putExpr(exprs_, "reject", d);
  return *this;
}

NftRule& NftRule::log(std::uint16_t group, std::uint32_t snaplen) {
  std::string d;
  const std::uint16_t be_group = htons(group);
  putAttr(d, NFTA_LOG_GROUP, {reinterpret_cast<const char*>(&be_group), sizeof be_group});
  putU32(d, NFTA_LOG_SNAPLEN, snaplen);
  putExpr(exprs_, "log", d);
  return *this;
}

NftRule& NftRule::raw(std::string_view name, std::string_view attributes) {
  putExpr(exprs_, name, attributes);
  return *this;
}

NftBatch::NftBatch() {
  // The batch's own messages carry the subsystem in res_id; the object messages carry their
  // family. Sequence numbers only need to be unique on this socket.
  end(begin(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, AF_UNSPEC, "batch"));
  first_seq_ = seq_;
}

std::uint32_t NftBatch::begin(std::uint16_t type, std::uint16_t flags, std::uint8_t family,
                              std::string object) {
  const std::uint32_t at = static_cast<std::uint32_t>(buf_.size());
  nlmsghdr h{};
  h.nlmsg_type = type;
  h.nlmsg_flags = flags;
  h.nlmsg_seq = ++seq_;
  buf_.append(reinterpret_cast<const char*>(&h), sizeof h);
  nfgenmsg g{};
  g.nfgen_family = family;
  g.version = NFNETLINK_V0;
  g.res_id =
      htons(type == NFNL_MSG_BATCH_BEGIN || type == NFNL_MSG_BATCH_END ? NFNL_SUBSYS_NFTABLES : 0);
  buf_.append(reinterpret_cast<const char*>(&g), sizeof g);
  buf_.append(NLMSG_ALIGN(sizeof g) - sizeof g, '\0');
  objects_.push_back(std::move(object));
  return at;
}

void NftBatch::end(std::uint32_t at) {
  const auto len = static_cast<std::uint32_t>(buf_.size() - at);
  std::memcpy(buf_.data() + at + offsetof(nlmsghdr, nlmsg_len), &len, sizeof len);
}

namespace {
constexpr std::uint16_t msgType(int msg) {
  return static_cast<std::uint16_t>(NFNL_SUBSYS_NFTABLES << 8 | msg);
}
constexpr std::uint16_t kCreate = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
}  // namespace

void NftBatch::addTable(std::uint8_t family, std::string_view table) {
  const auto at = begin(msgType(NFT_MSG_NEWTABLE), kCreate, family,
                        "table " + std::string(familyName(family)) + " " + std::string(table));
  putString(buf_, NFTA_TABLE_NAME, table);
  end(at);
}

void NftBatch::addBaseChain(std::uint8_t family, std::string_view table, std::string_view chain,
                            std::string_view type, std::uint32_t hook, std::int32_t priority,
                            std::uint32_t policy) {
  const auto at = begin(msgType(NFT_MSG_NEWCHAIN), kCreate, family,
                        "chain " + std::string(chain) + " (type " + std::string(type) + ")");
  putString(buf_, NFTA_CHAIN_TABLE, table);
  putString(buf_, NFTA_CHAIN_NAME, chain);
  const std::size_t h = nestBegin(buf_, NFTA_CHAIN_HOOK);
  putU32(buf_, NFTA_HOOK_HOOKNUM, hook);
  putU32(buf_, NFTA_HOOK_PRIORITY, static_cast<std::uint32_t>(priority));
  nestEnd(buf_, h);
  putU32(buf_, NFTA_CHAIN_POLICY, policy);
  putString(buf_, NFTA_CHAIN_TYPE, type);
  end(at);
}

void NftBatch::addRule(std::uint8_t family, std::string_view table, std::string_view chain,
                       const NftRule& rule) {
  const auto at = begin(msgType(NFT_MSG_NEWRULE),
                        NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_APPEND, family,
                        "rule " + std::to_string(++rules_) + " in chain " + std::string(chain) +
                            " (" + rule.description() + ")");
  putString(buf_, NFTA_RULE_TABLE, table);
  putString(buf_, NFTA_RULE_CHAIN, chain);
  const std::size_t e = nestBegin(buf_, NFTA_RULE_EXPRESSIONS);
  buf_.append(rule.encoded());
  nestEnd(buf_, e);
  end(at);
}

base::Result<void> NftBatch::commit(int fd) {
  std::string msg = buf_;
  {
    // END is not an object: the batch ends there and nothing acks it.
    nlmsghdr h{};
    h.nlmsg_len = NLMSG_LENGTH(sizeof(nfgenmsg));
    h.nlmsg_type = NFNL_MSG_BATCH_END;
    h.nlmsg_flags = NLM_F_REQUEST;
    h.nlmsg_seq = seq_ + 1;
    msg.append(reinterpret_cast<const char*>(&h), sizeof h);
    nfgenmsg g{};
    g.version = NFNETLINK_V0;
    g.res_id = htons(NFNL_SUBSYS_NFTABLES);
    msg.append(reinterpret_cast<const char*>(&g), sizeof g);
  }
  // Every object asked for an ack (NLM_F_ACK): the kernel processes the whole batch and then
  // reports each object's result, so the first refused one can be named. A refusal of the
  // batch itself (no CAP_NET_ADMIN, a malformed header) comes back on the BEGIN's sequence.
  const timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_nl kernel{};
  kernel.nl_family = AF_NETLINK;
  if (::sendto(fd, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) != static_cast<ssize_t>(msg.size())) {
    const int err = errno;  // read before the message's strings are built
    return std::unexpected(nftError("send the nftables batch", err));
  }
  const std::size_t expected = objects_.size() - 1;
  std::size_t acked = 0;
  std::uint32_t failed_seq = 0;
  int failed_err = 0;
  alignas(nlmsghdr) char reply[8192];
  while (acked < expected) {
    const ssize_t n = ::recv(fd, reply, sizeof reply, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno == EAGAIN ? ETIMEDOUT : errno;
      if (failed_err != 0) break;  // report what was refused even if an ack went missing
      return std::unexpected(nftError("the kernel's answer to the nftables batch (" +
                                          std::to_string(acked) + " of " +
                                          std::to_string(expected) + " objects acknowledged)",
                                      err));
    }
    int left = static_cast<int>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(reply); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_type != NLMSG_ERROR) continue;
      if (h->nlmsg_len < NLMSG_LENGTH(sizeof(nlmsgerr)))
        return std::unexpected(nftError("the kernel's answer to the nftables batch", EPROTO));
      const int err = -static_cast<const nlmsgerr*>(NLMSG_DATA(h))->error;
      const std::uint32_t seq = h->nlmsg_seq;
      if (seq < first_seq_ || seq > seq_) continue;  // not this batch's
      if (seq == first_seq_) return std::unexpected(nftError("batch", err != 0 ? err : EPROTO));
      ++acked;
      if (err != 0 && (failed_err == 0 || seq < failed_seq)) {
        failed_seq = seq;
        failed_err = err;
      }
    }
  }
  if (failed_err != 0)
    return std::unexpected(nftError(objects_[failed_seq - first_seq_], failed_err));
  return {};
}

base::Result<int> openNftSocket() {
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) {
    const int err = errno;
    return std::unexpected(nftError("netfilter netlink socket", err));
  }
  // Acks without a copy of the (large) request they answer.
  const int one = 1;
  ::setsockopt(fd, SOL_NETLINK, NETLINK_CAP_ACK, &one, sizeof one);
  return fd;
}

}  // namespace sluice::runner::detail
