// DNS wire format for sluice's DNS (DESIGN.md "Transparent capture and DNS"): parse one query,
// build one response. Only what a stub resolver sends is accepted: one question, no answer or
// authority records, at most one OPT record (EDNS) in the additional section.
//
// Own parser rather than Debian's ldns (libldns-dev): sluice's DNS parses queries only and
// answers with at most one A/AAAA record, so the whole codec is ~250 lines with bounds checks on
// every read; ldns would add a C dependency (to the build, the static binary, the clang fuzz
// build) whose packet parser accepts far more than we want (every RR type, compression
// anywhere, multiple questions) and allocates an ldns_pkt per query, yet we would still have
// to reject all of that ourselves. The narrow parser is fuzzed (fuzz/dns_fuzz.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sluice/policy/ip_address.hpp"

namespace sluice::proxy::dns {

/// Response codes (RFC 1035 4.1.1; BADVERS is EDNS's extended code 16, RFC 6891).
enum class Rcode : std::uint16_t {
  kNoError = 0,
  kFormErr = 1,
  kServFail = 2,
  kNxDomain = 3,
  kNotImp = 4,
  kRefused = 5,
  kBadVers = 16,
};

/// The name used in audit rows for a response code ("NXDOMAIN", ...).
std::string rcodeName(Rcode r);

inline constexpr std::uint16_t kTypeA = 1;
inline constexpr std::uint16_t kTypeAAAA = 28;
inline constexpr std::uint16_t kTypeOpt = 41;
inline constexpr std::uint16_t kClassIn = 1;
/// Largest UDP response without EDNS (RFC 1035 4.2.1), and the most we ever send over UDP
/// (the DNS flag day 2020 value: no IP fragmentation).
inline constexpr std::size_t kUdpPlainLimit = 512;
inline constexpr std::size_t kUdpEdnsLimit = 1232;

/// "A", "AAAA", "TXT", ... or "TYPE<n>" (RFC 3597 presentation).
std::string qtypeName(std::uint16_t type);

struct Question {
  /// Presentation form, lower-case, no trailing dot ("" for the root). Bytes other than
  /// [a-z0-9-_] inside a label are written \DDD, so the text is always printable.
  std::string name;
  /// True when no byte needed escaping (the name can be a host name at all).
  bool plain = true;
  /// The name as it came, uncompressed, case kept (echoed in the response: some stub
  /// resolvers check the case they sent, RFC 5452 "0x20").
  std::string wire;
  std::uint16_t type = 0;
  std::uint16_t klass = 0;
};

struct Query {
  std::uint16_t id = 0;
  bool recursion_desired = false;
  std::optional<Question> question;  // set when the question parsed
  bool edns = false;                 // an OPT record was present
  std::uint16_t udp_payload = 512;   // the client's advertised size (EDNS)
  std::uint8_t edns_version = 0;
};

struct Parsed {
  Query query;
  /// kNoError: a well-formed query. Otherwise the code to answer with (FORMERR, NOTIMP).
  Rcode error = Rcode::kNoError;
  /// Not to be answered at all: a response (QR set; answering responses lets two servers
  /// loop) or too short to carry an id.
  bool drop = false;
  std::string problem;  // why it is malformed, for the log
};

/// Parses one DNS message (without the TCP length prefix). Never throws, never reads outside
/// `msg`. The question's name may not be compressed (a pointer there could only make a short
/// query expand); elsewhere pointers must point strictly backwards, so they cannot loop.
Parsed parseQuery(std::span<const std::uint8_t> msg);

/// Builds the response to `q` with `rcode` and, if given, one answer record (A for an IPv4
/// address, AAAA for IPv6, TTL 1 s, class IN). If the result would exceed `limit` bytes, the
/// answer is dropped and TC set (then the question too, if still needed).
std::vector<std::uint8_t> buildResponse(const Query& q, Rcode rcode,
                                        const std::optional<policy::IpAddress>& answer,
                                        std::size_t limit);

}  // namespace sluice::proxy::dns
