// libFuzzer target: arbitrary bytes as a DNS query to sluice's DNS (proxy/src/dns_answerer.cpp,
// dns_message.cpp), over UDP and over TCP. Properties, beyond "no crash" (ASan, UBSan):
//  - a response is a DNS response (QR set) with the query's id, never longer than 512 bytes
//    over UDP unless the query carried EDNS (then 1232), and never much longer than the
//    query (no amplification);
//  - an address is only ever given for a name the policy could allow, and it maps back to
//    that name (SyntheticNames::nameOf).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>

#include "dns_answerer.hpp"
#include "dns_message.hpp"
#include "sluice/policy/loader.hpp"

namespace {

namespace pol = sluice::policy;
namespace px = sluice::proxy;

[[noreturn]] void violated(const char* what) {
  std::fprintf(stderr, "PROPERTY VIOLATED: %s\n", what);
  std::abort();
}

std::shared_ptr<const pol::Matcher> makeMatcher() {
  static const std::string yaml =
      "apiVersion: sluice/v1\nkind: Workflow\nname: dnsfuzz\n"
      "egress:\n  rules:\n"
      "    - {id: a, action: allow, hosts: [pypi.org, \"*.allowed.example\"]}\n"
      "    - {id: r, action: allow, hosts: [\"re:api[0-9]+\\\\.x\\\\.example\"], ports: [22]}\n"
      "    - {id: d, action: deny, hosts: [\"*.no.allowed.example\"]}\n"
      "  limits: {max_dns_queries: 1000000}\n";
  auto w = pol::parseWorkflow(yaml, "dnsfuzz.yaml");
  if (!w) violated("fuzz policy does not load");
  return pol::Matcher::compile(std::make_shared<const pol::Workflow>(std::move(*w)));
}

std::uint16_t at16(const std::vector<std::uint8_t>& b, std::size_t i) {
  return static_cast<std::uint16_t>((b[i] << 8) | b[i + 1]);
}

void check(std::span<const std::uint8_t> query, px::dns::Transport t,
           const std::shared_ptr<const pol::Matcher>& m) {
  auto names = std::make_shared<px::SyntheticNames>();
  px::dns::Answerer answerer(m, names);
  px::dns::Outcome o = answerer.answer(query, t);
  if (!o.respond) return;
  const auto& r = o.response;
  if (r.size() < 12) violated("response shorter than a header");
  if (!(r[2] & 0x80)) violated("response without QR");
  if (query.size() >= 2 && at16(r, 0) != ((query[0] << 8) | query[1])) violated("id changed");
  auto parsed = px::dns::parseQuery(query);
  if (t == px::dns::Transport::kUdp) {
    std::size_t limit = parsed.query.edns ? px::dns::kUdpEdnsLimit : px::dns::kUdpPlainLimit;
    if (r.size() > limit) violated("UDP response over its size limit");
  }
  if (r.size() > query.size() + 64) violated("response much larger than the query");
  if (at16(r, 6) > 1) violated("more than one answer");
  if (at16(r, 6) == 1) {
    if (!parsed.query.question || !parsed.query.question->plain ||
        !m->nameMayBeAllowed(parsed.query.question->name))
      violated("an address for a name the policy does not allow");
    if (o.event.answer.empty()) violated("answer not recorded");
    auto addr = pol::parseIpLiteral(o.event.answer);
    if (!addr || names->nameOf(*addr) != parsed.query.question->name)
      violated("synthetic address does not map back to the name");
  }
  if (o.event.decision != "allow" && o.event.decision != "deny") violated("bad decision");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto matcher = makeMatcher();
  std::span<const std::uint8_t> q(data, size);
  check(q, px::dns::Transport::kUdp, matcher);
  if (size <= 65535) check(q, px::dns::Transport::kTcp, matcher);
  return 0;
}
