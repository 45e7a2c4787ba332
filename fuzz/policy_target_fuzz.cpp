// libFuzzer target for the destination parsers the proxy runs on untrusted input from the
// sandbox: CONNECT authorities, absolute URLs, IP literals in every spelling, plus CIDRs,
// durations and sizes. Besides "never crash", it checks invariants the matcher relies on:
//  - a parsed IP literal's canonical text parses back to the same address;
//  - a Target is a fixed point: makeTarget(t.host, t.port) gives the same host and address;
//  - a CIDR's canonical text parses back to the same CIDR and contains its network address;
//  - a decision on any parsed target never crashes and names a rule when it allows.
// A violated invariant aborts, so libFuzzer saves the input.
//
// Build and run like policy_loader_fuzz (see fuzz/CMakeLists.txt).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "sluice/policy/ip_address.hpp"
#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/target.hpp"
#include "sluice/policy/units.hpp"

namespace {

namespace pol = sluice::policy;

[[noreturn]] void violated(const char* what, std::string_view input) {
  std::fprintf(stderr, "invariant violated: %s (input '%.*s')\n", what,
               static_cast<int>(input.size()), input.data());
  std::abort();
}

// A small workflow with every kind of rule, compiled once.
const pol::Matcher& matcher() {
  static const std::shared_ptr<const pol::Matcher> m = [] {
    auto wf = pol::parseWorkflow(R"(apiVersion: sluice/v1
kind: Workflow
name: fuzz
egress:
  rules:
    - id: exact
      action: allow
      hosts: ["example.com", "*.example.net", 're:api[0-9]+\.example\.org']
    - id: inspect
      action: allow
      hosts: ["api.example.com"]
      ports: [443]
      tls: inspect
      methods: [GET]
      paths: ["/v1/*", "re:/h.*z"]
    - id: lan
      action: allow
      cidrs: ["10.0.0.0/8", "fd00::/8", "127.0.0.1"]
      allow_private: true
      ports: ["1-65535"]
    - id: no-meta
      action: deny
      cidrs: ["169.254.0.0/16"]
    - id: no-post
      action: deny
      hosts: ["*.example.net"]
      methods: [POST]
)",
                                 "fuzz.yaml");
    if (!wf) {
      std::fprintf(stderr, "%s\n", wf.error().str().c_str());
      std::abort();
    }
    return pol::Matcher::compile(std::make_shared<const pol::Workflow>(std::move(*wf)));
  }();
  return *m;
}

void checkTarget(const pol::Target& t, std::string_view input) {
  auto again = pol::makeTarget(t.ip && !t.ip->isV4() ? "[" + t.host + "]" : t.host, t.port);
  if (!again) violated("canonical target does not parse again", input);
  if (again->host != t.host || again->ip != t.ip) violated("target is not a fixed point", input);
  const auto& m = matcher();
  for (auto vis : {pol::Visibility::kTunnel, pol::Visibility::kPlainHttp}) {
    auto d = m.decide({t, vis});
    if (d.allowed && d.rule_id.empty()) violated("allow without a rule", input);
    if (d.allowed) {
      const auto addr = t.ip ? *t.ip : pol::IpAddress::v4(0x0A000001);
      auto a = m.decide({t, vis, nullptr, &addr});
      if (a.allowed && a.rule_id.empty()) violated("address allow without a rule", input);
    }
  }
  const pol::HttpRequest get{"GET", "/v1/x", ""};
  auto r = m.decide({t, pol::Visibility::kPlainHttp, &get});
  if (r.allowed && r.rule_id.empty()) violated("request allow without a rule", input);
}

// The canonical request is a fixed point and holds none of the shapes it exists to remove.
void checkCanonicalRequest(std::string_view input) {
  auto r = pol::canonicalRequest("GET", input);
  if (!r) return;
  const auto& p = r->path;
  if (p.empty() || p.front() != '/') violated("canonical path does not start with /", input);
  if (p.find("//") != std::string::npos) violated("canonical path has an empty segment", input);
  if (p.find("/./") != std::string::npos || p.find("/../") != std::string::npos ||
      p.ends_with("/.") || p.ends_with("/.."))
    violated("canonical path has a dot segment", input);
  if (p.find('\\') != std::string::npos) violated("canonical path has a backslash", input);
  // No segment a Windows server would trim, nor a row of dots.
  for (std::size_t b = 1, e; b <= p.size(); b = e + 1) {
    e = p.find('/', b);
    if (e == std::string::npos) e = p.size();
    const std::string_view seg = std::string_view(p).substr(b, e - b);
    const std::string_view name = seg.substr(0, seg.find(';'));
    if (name.ends_with('.') || name.ends_with("%20") || seg.ends_with('.') || seg.ends_with("%20"))
      violated("canonical path has a segment ending in a dot or a space", input);
  }
  if (r->hasPathParams() != (p.find(';') != std::string::npos) ||
      r->bare_path.find(';') != std::string::npos)
    violated("bare path does not cut off exactly the ';' parameters", input);
  auto again = pol::canonicalRequest("GET", r->target());
  if (!again || again->path != r->path || again->query != r->query)
    violated("canonical request is not a fixed point", input);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);

  if (auto ip = pol::parseIpLiteral(in)) {
    auto back = pol::parseIpLiteral(ip->str());
    if (!back || !(*back == *ip)) violated("IP literal canonical text does not round-trip", in);
    (void)pol::classifyAddress(*ip);
    (void)ip->embeddedV4();
  }
  if (auto t = pol::parseAuthority(in)) checkTarget(*t, in);
  checkCanonicalRequest(in);
  if (auto u = pol::parseUrl(in)) {
    checkTarget(u->target, in);
    if (u->path.empty() || u->path.front() != '/') violated("URL path does not start with /", in);
    if (auto req = pol::canonicalRequest("POST", u->path))
      (void)matcher().decide({u->target, pol::Visibility::kPlainHttp, &*req, nullptr, true});
  }
  if (auto c = pol::parseCidr(in)) {
    auto back = pol::parseCidr(c->str());
    if (!back || !(back->network == c->network) || back->prefix != c->prefix) {
      violated("CIDR canonical text does not round-trip", in);
    }
    if (!c->contains(c->network)) violated("CIDR does not contain its network", in);
  }
  if (auto h = pol::normalizeHostName(in)) {
    auto again = pol::normalizeHostName(*h);
    if (!again || *again != *h) violated("host normalisation is not idempotent", in);
  }
  if (auto d = pol::parseDuration(in)) {
    auto back = pol::parseDuration(pol::formatDuration(*d));
    if (!back || *back != *d) violated("duration does not round-trip through formatDuration", in);
  }
  if (auto s = pol::parseSize(in)) {
    auto back = pol::parseSize(pol::formatSize(*s));
    if (!back || *back != *s) violated("size does not round-trip through formatSize", in);
  }
  return 0;
}
