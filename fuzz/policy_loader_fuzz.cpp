// libFuzzer target for the policy loader: arbitrary bytes -> parseWorkflow. When the loader
// accepts the input, the workflow is compiled and a few decisions are taken against targets
// derived from its own rules, so the matcher sees every pattern the loader lets through.
// Every accepted inject template is expanded against a store holding each secret it names:
// expansion must succeed and leave no `${secret:` behind. The loader must never crash, hang
// or leak on any input; the matcher must never crash on anything the loader accepted.
//
// Build (clang 16: see fuzz/CMakeLists.txt for why the __cpp_concepts override is needed):
//   CC=clang-16 CXX=clang++-16 cmake -S . -B build-fuzz -G Ninja -DSLUICE_FUZZ=ON
//     -DCMAKE_CXX_FLAGS="-U__cpp_concepts -D__cpp_concepts=202002L"
//   cmake --build build-fuzz --target policy_loader_fuzz
// Run for FUZZ_SECONDS (default 600) with the dictionary and the seed corpus:
//   cmake --build build-fuzz --target fuzz_policy_loader
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/policy/loader.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/policy/target.hpp"

namespace {

using sluice::policy::HostPattern;
using sluice::policy::Matcher;
using sluice::policy::Target;
using sluice::policy::Visibility;

// Hosts to try against a rule's host pattern: the pattern itself for exact hosts, a
// subdomain and the bare suffix for wildcards, and a few fixed names for regexes.
void hostsFor(const HostPattern& p, std::vector<std::string>& out) {
  switch (p.kind) {
    case HostPattern::Kind::kExact:
      out.push_back(p.value);
      out.push_back(p.value + ".evil.example");
      break;
    case HostPattern::Kind::kSuffix:
      out.push_back("a." + p.value);
      out.push_back(p.value);
      out.push_back("evil-" + p.value);
      break;
    case HostPattern::Kind::kRegex:
      out.push_back("api.example.org");
      break;
  }
}

void decide(const Matcher& m, const Target& t) {
  for (auto vis : {Visibility::kTunnel, Visibility::kPlainHttp}) {
    auto d = m.decide({t, vis});
    if (!d.allowed) continue;
    for (const char* ip :
         {"10.20.0.1", "127.0.0.1", "93.184.216.34", "::ffff:169.254.169.254", "2001:db8::1"}) {
      if (auto a = sluice::policy::parseIpLiteral(ip)) (void)m.decide({t, vis, nullptr, &*a});
    }
    for (auto [method, target] : {std::pair{"GET", "/v1/x"}, std::pair{"POST", "/"},
                                  std::pair{"DELETE", "/v1/admin/a?b=c"}}) {
      auto r = sluice::policy::canonicalRequest(method, target);
      if (r) (void)m.decide({t, Visibility::kPlainHttp, &*r, nullptr, true});
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto wf = sluice::policy::parseWorkflow(text, "fuzz.yaml");
  if (!wf) {
    (void)wf.error().str();
    return 0;
  }
  auto workflow = std::make_shared<const sluice::policy::Workflow>(std::move(*wf));
  auto matcher = Matcher::compile(workflow);

  std::map<std::string, std::string> values;
  for (const auto& name : workflow->secretNames()) values[name] = "v-" + name;
  auto store = sluice::policy::makeSecretStore(values);
  if (!sluice::policy::missingSecrets(*workflow, store.get()).empty()) {
    std::fprintf(stderr, "secretNames() and missingSecrets() disagree\n");
    std::abort();
  }
  for (const auto& rule : workflow->rules) {
    for (const auto& [name, tmpl] : rule.inject.headers) {
      auto v = sluice::policy::expandSecretTemplate(tmpl, *store);
      if (!v || v->find("${secret:") != std::string::npos) {
        std::fprintf(stderr, "accepted template '%s' does not expand\n", tmpl.c_str());
        std::abort();
      }
      sluice::policy::wipeString(*v);
    }
  }

  std::vector<std::string> hosts = {"example.com", "127.0.0.1", "10.20.0.1", "[::1]", "2130706433"};
  std::vector<std::uint16_t> ports = {80, 443};
  int budget = 16;  // bound the work per input: keep executions fast
  for (const auto& rule : workflow->rules) {
    for (const auto& h : rule.hosts) hostsFor(h, hosts);
    for (const auto& c : rule.cidrs) hosts.push_back(c.network.str());
    for (const auto& r : rule.ports) ports.push_back(r.hi);
    if (--budget == 0) break;
  }
  int decisions = 64;
  for (const auto& h : hosts) {
    for (auto p : ports) {
      if (decisions-- == 0) return 0;
      auto t = sluice::policy::makeTarget(h, p);
      if (t) decide(*matcher, *t);
    }
  }
  return 0;
}
