// Loading policy: every validation message with its exact FILE:LINE:COL, and policy dirs.
#include "sluice/policy/loader.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "sluice/policy/host_mounts.hpp"

namespace sluice::policy {
namespace {

constexpr std::string_view kHead =
    "apiVersion: sluice/v1\n"
    "kind: Workflow\n"
    "name: wf\n";

// Returns the diagnostics, one per line, for a policy that must fail to load.
std::string problems(std::string_view yaml) {
  auto w = parseWorkflow(yaml, "p.yaml");
  if (w) return "<loaded>";
  return w.error().str();
}

std::string rule(std::string_view body) {
  return std::string(kHead) + "egress:\n  rules:\n    - id: r1\n      action: allow\n" +
         std::string(body);
}

TEST(Loader, LoadsTheDesignExample) {
  std::string yaml = std::string(kHead) +
                     "description: d\n"
                     "sandbox:\n  timeout: 30s\n  cpu_time: 20s\n  memory: 512MiB\n  pids: 64\n"
                     "  output: 1MiB\n  disk: 100MiB\n  network: proxy\n"
                     "egress:\n  rules:\n"
                     "    - id: stats-api\n      action: allow\n"
                     "      hosts: [\"stats.internal.example\"]\n      ports: [443]\n"
                     "      allow_private: true\n      cidrs: [\"10.20.0.0/16\"]\n"
                     "      tls: inspect\n      methods: [GET, post]\n      paths: [\"/v1/*\"]\n"
                     "      inject:\n        headers:\n"
                     "          Authorization: \"Bearer ${secret:stats_token}\"\n"
                     "        placeholder_env: STATS_TOKEN\n"
                     "  limits:\n    max_connections: 32\n    max_bytes_out: 10MiB\n";
  auto w = parseWorkflow(yaml, "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  EXPECT_EQ(w->name, "wf");
  EXPECT_EQ(w->sandbox.memory, 512ull << 20);
  ASSERT_EQ(w->rules.size(), 1u);
  const Rule& r = w->rules[0];
  EXPECT_EQ(r.tls, TlsMode::kInspect);
  EXPECT_EQ(r.methods, (std::vector<std::string>{"GET", "POST"}));
  EXPECT_EQ(r.inject.secret_names, std::vector<std::string>{"stats_token"});
  EXPECT_EQ(r.inject.placeholder_env, "STATS_TOKEN");
  EXPECT_EQ(w->limits.max_bytes_out, 10ull << 20);
  EXPECT_EQ(w->limits.max_requests, 1000u);     // default kept
  EXPECT_EQ(w->limits.max_dns_queries, 1000u);  // default kept
  EXPECT_EQ(w->sha256.size(), 64u);
  EXPECT_EQ(w->secretNames(), std::vector<std::string>{"stats_token"});
}

TEST(Loader, DefaultPortsAre80And443) {
  auto w = parseWorkflow(rule("      hosts: [a.example]\n"), "p.yaml").value();
  EXPECT_EQ(w.rules[0].portsText(), "[80, 443]");
}

TEST(Loader, UnknownKeySuggestsTheRightOne) {
  EXPECT_EQ(problems(rule("      hots: [a.example]\n")),
            "p.yaml:6:7: rule 'r1' names neither 'hosts' nor 'cidrs'\n"
            "p.yaml:8:7: unknown key 'hots' in rule (did you mean 'hosts'?)\n");
  EXPECT_EQ(problems(std::string(kHead) + "sandbx:\n  timeout: 1s\n"),
            "p.yaml:4:1: unknown key 'sandbx' in the workflow (did you mean 'sandbox'?)\n");
}

TEST(Loader, WrongTypes) {
  EXPECT_EQ(problems(std::string(kHead) + "sandbox:\n  pids: many\n"),
            "p.yaml:5:9: sandbox.pids must be a positive integer\n");
  EXPECT_EQ(problems(rule("      hosts: a.example\n")), "p.yaml:8:14: hosts must be a list\n");
  EXPECT_EQ(problems(rule("      hosts: [a.example]\n      allow_private: yes please\n")),
            "p.yaml:9:22: allow_private must be true or false\n");
  EXPECT_EQ(problems(std::string(kHead) + "sandbox: 5\n"),
            "p.yaml:4:10: sandbox must be a mapping\n");
}

TEST(Loader, BadDurationsAndSizes) {
  EXPECT_EQ(problems(std::string(kHead) + "sandbox:\n  timeout: 30x\n  memory: 12QB\n"),
            "p.yaml:5:12: sandbox.timeout: bad duration '30x': unknown unit 'x' (use ms, s, m, "
            "h or d)\n"
            "p.yaml:6:11: sandbox.memory: bad size '12QB': unknown unit 'QB' (use B, KB, KiB, MB, "
            "MiB, GB, GiB, TB or TiB)\n");
  EXPECT_EQ(problems(std::string(kHead) + "sandbox:\n  timeout: 0s\n"),
            "p.yaml:5:12: sandbox.timeout must be more than zero\n");
}

TEST(Loader, MalformedHostPatterns) {
  EXPECT_EQ(problems(rule("      hosts: [\"*.com\"]\n")),
            "p.yaml:8:15: '*.com' covers the public suffix 'com' (every domain under it); name "
            "the domains you mean\n");
  EXPECT_NE(problems(rule("      hosts: [\"*.co.uk\"]\n")).find("public suffix 'co.uk'"),
            std::string::npos);
  EXPECT_EQ(problems(rule("      hosts: [\"foo.*.com\"]\n")),
            "p.yaml:8:15: '*' may only be the whole first label, as in *.example.com (got "
            "'foo.*.com')\n");
  EXPECT_NE(problems(rule("      hosts: [\"*foo.com\"]\n")).find("whole first label"),
            std::string::npos);
  EXPECT_NE(problems(rule("      hosts: [\"*\"]\n")).find("whole first label"), std::string::npos);
  EXPECT_EQ(problems(rule("      hosts: [\"\"]\n")), "p.yaml:8:15: empty host pattern\n");
  EXPECT_EQ(problems(rule("      hosts: [\"a..example\"]\n")),
            "p.yaml:8:15: host 'a..example' has an empty label\n");
  EXPECT_NE(problems(rule("      hosts: [\"" + std::string(64, 'x') + ".example\"]\n"))
                .find("longer than 63"),
            std::string::npos);
  EXPECT_EQ(problems(rule("      hosts: [\"bücher.example\"]\n")),
            "p.yaml:8:15: host 'bücher.example' is not ASCII: write internationalised names in "
            "punycode (xn--...)\n");
  EXPECT_NE(problems(rule("      hosts: [\"10.0.0.1\"]\n")).find("matched by 'cidrs'"),
            std::string::npos);
}

TEST(Loader, HostPatternsThatCanNeverMatch) {
  EXPECT_EQ(problems(rule("      hosts: [\"files.123\"]\n")),
            "p.yaml:8:15: 'files.123' can never match: host 'files.123' looks like an IPv4 "
            "address but is not one\n");
  EXPECT_NE(problems(rule("      hosts: [\"*.a.0x1f\"]\n")).find("can never match"),
            std::string::npos);
}

TEST(Loader, DiagnosticsAreInFileOrder) {
  auto w = parseWorkflow(rule("      hosts: [\"*.com\"]\n      ports: [0]\n      tls: maybe\n"),
                         "p.yaml");
  ASSERT_FALSE(w);
  const auto& d = w.error().diagnostics;
  ASSERT_EQ(d.size(), 3u);
  EXPECT_LT(d[0].pos.line, d[1].pos.line);
  EXPECT_LT(d[1].pos.line, d[2].pos.line);
}

TEST(Loader, RegexErrorsCarryRe2Message) {
  EXPECT_EQ(problems(rule("      hosts: [\"re:(\"]\n")),
            "p.yaml:8:15: invalid regular expression '(': missing ): (\n");
  EXPECT_NE(problems(rule("      hosts: [a.example]\n      paths: [\"re:[\"]\n"))
                .find("invalid regular expression '['"),
            std::string::npos);
}

TEST(Loader, BadPortsAndCidrs) {
  EXPECT_EQ(problems(rule("      hosts: [a.example]\n      ports: [0, \"9-1\", 70000, \"80-\"]\n")),
            "p.yaml:9:15: bad port '0' (expected 1-65535)\n"
            "p.yaml:9:18: bad port range '9-1': 9 is more than 1\n"
            "p.yaml:9:25: bad port '70000' (expected 1-65535)\n"
            "p.yaml:9:32: bad port range '80-' (expected e.g. \"8000-8100\", ports 1-65535)\n");
  EXPECT_EQ(problems(rule("      cidrs: [\"10.1.2.3/8\"]\n")),
            "p.yaml:8:15: bad CIDR '10.1.2.3/8': host bits are set (did you mean 10.0.0.0/8?)\n");
  EXPECT_NE(problems(rule("      cidrs: [\"fd00::/129\"]\n")).find("more than 128"),
            std::string::npos);
}

TEST(Loader, DuplicateRuleIds) {
  std::string yaml = std::string(kHead) +
                     "egress:\n  rules:\n"
                     "    - {id: a, action: allow, hosts: [x.example]}\n"
                     "    - {id: a, action: deny, hosts: [y.example]}\n";
  EXPECT_EQ(problems(yaml), "p.yaml:7:12: duplicate rule id 'a'\n");
}

TEST(Loader, RequestConditionsNeedInspectableTraffic) {
  EXPECT_EQ(problems(rule("      hosts: [a.example]\n      ports: [443]\n      methods: [GET]\n")),
            "p.yaml:10:16: 'methods' on rule 'r1' cannot be enforced: its traffic (port 443, "
            "tls: passthrough) is encrypted; add 'tls: inspect'\n");
  EXPECT_NE(problems(rule("      hosts: [a.example]\n      ports: [443]\n      paths: [/x]\n"))
                .find("'paths' on rule 'r1' cannot be enforced"),
            std::string::npos);
  // Port 80 can be inspected, so methods are fine without tls: inspect.
  EXPECT_EQ(problems(rule("      hosts: [a.example]\n      methods: [GET]\n")), "<loaded>");
  EXPECT_EQ(problems(rule("      hosts: [a.example]\n      ports: [443]\n      tls: inspect\n"
                          "      methods: [GET]\n")),
            "<loaded>");
}

TEST(Loader, SecretReferences) {
  std::string base =
      "      hosts: [a.example]\n      tls: inspect\n      inject:\n        headers:\n";
  EXPECT_EQ(problems(rule(base + "          Authorization: \"Bearer ${secret:}\"\n")),
            "p.yaml:12:26: bad secret name '' in ${secret:...} (letters, digits, '_', '-', '.')\n");
  EXPECT_EQ(problems(rule(base + "          Authorization: \"Bearer ${secret:tok\"\n")),
            "p.yaml:12:26: unterminated '${' in header value (write ${secret:NAME})\n");
  EXPECT_EQ(problems(rule(base + "          Authorization: \"Bearer ${env:HOME}\"\n")),
            "p.yaml:12:26: unknown reference '${env:HOME}' in header value (only ${secret:NAME} "
            "is supported)\n");
  EXPECT_NE(problems(rule(base + "          Host: \"x\"\n")).find("cannot be injected"),
            std::string::npos);
  EXPECT_NE(problems(rule(base + "          X-A: \"${secret:a}\"\n          X-B: \"${secret:b}\"\n"
                                 "        placeholder_env: TOKEN\n"))
                .find("needs exactly one ${secret:NAME}"),
            std::string::npos);
}

// `paths_case` and `path_params`, and the warning on a deny rule's paths.
TEST(Loader, PathsCaseAndPathParams) {
  auto w = parseWorkflow(rule("      hosts: [a.example]\n      paths: [/V1/*]\n"
                              "      paths_case: insensitive\n      path_params: allow\n"),
                         "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  EXPECT_TRUE(w->rules[0].paths_case_insensitive);
  EXPECT_TRUE(w->rules[0].path_params_allowed);
  EXPECT_EQ(
      problems(rule("      hosts: [a.example]\n      paths: [/x]\n      paths_case: lower\n")),
      "p.yaml:10:19: paths_case must be 'sensitive' or 'insensitive' (got 'lower')\n");
  EXPECT_EQ(problems(rule("      hosts: [a.example]\n      path_params: yes\n")),
            "p.yaml:9:20: path_params must be 'refuse' or 'allow' (got 'yes')\n");
  EXPECT_EQ(problems(rule("      hosts: [a.example]\n      paths_case: insensitive\n")),
            "p.yaml:9:19: 'paths_case' on rule 'r1' has no effect without 'paths'\n");
  std::string deny = std::string(kHead) +
                     "egress:\n  rules:\n    - id: d\n      action: deny\n"
                     "      hosts: [a.example]\n      paths: [/admin/*]\n";
  EXPECT_EQ(problems(deny + "      path_params: refuse\n"),
            "p.yaml:10:20: 'path_params' on deny rule 'd' has no effect (a deny rule always "
            "matches a path both with and without its ';' parameters)\n");
}

TEST(Loader, DenyOrAskRuleWithPathsWarnsUntilPathsCaseIsChosen) {
  // (An allow rule first: a workflow that allows nothing is warned about too.)
  const std::string allow_first =
      "egress:\n  rules:\n    - id: a\n      action: allow\n"
      "      hosts: [b.example]\n";
  std::string deny = std::string(kHead) + allow_first +
                     "    - id: d\n      action: deny\n"
                     "      hosts: [a.example]\n      paths: [/admin/*]\n      tls: inspect\n";
  auto w = parseWorkflow(deny, "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  ASSERT_EQ(w->warnings.size(), 1u);
  EXPECT_EQ(w->warnings[0].str(),
            "p.yaml:12:14: warning: deny rule 'd' names paths without 'paths_case': a "
            "case-insensitive upstream would route /V1/ADMIN as /v1/admin, which this rule does "
            "not deny; set 'paths_case: insensitive' to deny every spelling, or 'paths_case: "
            "sensitive' if the upstream is case-sensitive");
  for (const char* choice : {"sensitive", "insensitive"}) {
    auto chosen = parseWorkflow(deny + "      paths_case: " + choice + "\n", "p.yaml");
    ASSERT_TRUE(chosen) << chosen.error().str();
    EXPECT_TRUE(chosen->warnings.empty()) << choice;
  }
  // An ask rule a spelling misses lets an allow rule next to it decide without the approver.
  std::string ask = std::string(kHead) + allow_first +
                    "    - id: q\n      action: ask\n"
                    "      hosts: [a.example]\n      paths: [/admin/*]\n      tls: inspect\n";
  auto asked = parseWorkflow(ask, "p.yaml");
  ASSERT_TRUE(asked) << asked.error().str();
  ASSERT_EQ(asked->warnings.size(), 1u);
  EXPECT_NE(asked->warnings[0].str().find("ask rule 'q' names paths without 'paths_case'"),
            std::string::npos)
      << asked->warnings[0].str();
  // Allow rules fail closed on another case (no match), so they are not warned about.
  auto allow = parseWorkflow(
      rule("      hosts: [a.example]\n      paths: [/x]\n      tls: inspect\n"), "p.yaml");
  ASSERT_TRUE(allow);
  EXPECT_TRUE(allow->warnings.empty());
}

// Only what is true: TLS escapes a deny rule's request conditions (another rule tunnels it
// through unseen), but an allow or ask rule's passthrough TLS tunnel is refused
// (inspection_required), and a rule for port 80 only sees no TLS.
TEST(Loader, WarnsAboutTlsOnlyWhereItEscapesTheRule) {
  const std::string head = std::string(kHead) + "egress:\n  rules:\n";
  const std::string allow_other =
      "    - id: other\n      action: allow\n      hosts: [b.example]\n";
  for (const char* action : {"allow", "ask"}) {
    auto w = parseWorkflow(head + "    - id: r\n      action: " + action +
                               "\n      hosts: [a.example]\n      methods: [GET]\n",
                           "p.yaml");
    ASSERT_TRUE(w) << w.error().str();
    EXPECT_TRUE(w->warnings.empty()) << action << ": " << w->warnings[0].str();
  }
  auto port80 = parseWorkflow(head + allow_other +
                                  "    - id: d\n      action: deny\n      hosts: [a.example]\n"
                                  "      ports: [80]\n      methods: [POST]\n",
                              "p.yaml");
  ASSERT_TRUE(port80) << port80.error().str();
  EXPECT_TRUE(port80->warnings.empty()) << port80->warnings[0].str();
  auto deny = parseWorkflow(head + allow_other +
                                "    - id: d\n      action: deny\n      hosts: [a.example]\n"
                                "      methods: [POST]\n",
                            "p.yaml");
  ASSERT_TRUE(deny) << deny.error().str();
  ASSERT_EQ(deny->warnings.size(), 1u);
  EXPECT_EQ(deny->warnings[0].str(),
            "p.yaml:12:16: warning: rule 'd' restricts methods with tls: passthrough: plain HTTP "
            "to ports [80, 443] is judged per request, but TLS tunnelled through to them is not; "
            "add 'tls: inspect' to enforce it on HTTPS");
}

TEST(Loader, WarnsAboutAWorkflowThatCanReachNothing) {
  const std::string deny_only = std::string(kHead) +
                                "egress:\n  rules:\n    - id: d\n      action: deny\n"
                                "      hosts: [a.example]\n";
  for (const std::string& yaml : {std::string(kHead), deny_only}) {
    auto w = parseWorkflow(yaml, "p.yaml");
    ASSERT_TRUE(w) << w.error().str();
    ASSERT_EQ(w->warnings.size(), 1u) << yaml;
    EXPECT_NE(w->warnings[0].str().find(
                  "warning: workflow 'wf' can reach nothing: it has no allow or ask rule, so "
                  "every connection is refused; add a rule, or set 'sandbox: {network: none}' "
                  "if it needs no network"),
              std::string::npos)
        << w->warnings[0].str();
  }
  // network: none says it on purpose; one allow or ask rule reaches something.
  auto none = parseWorkflow(std::string(kHead) + "sandbox:\n  network: none\n", "p.yaml");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->warnings.empty());
  auto ask = parseWorkflow(std::string(kHead) +
                               "egress:\n  rules:\n    - id: q\n      action: ask\n"
                               "      hosts: [a.example]\n",
                           "p.yaml");
  ASSERT_TRUE(ask);
  EXPECT_TRUE(ask->warnings.empty()) << ask->warnings[0].str();
}

TEST(Loader, SandboxMountsAreReadOnlyHostPaths) {
  auto w = parseWorkflow(std::string(kHead) +
                             "sandbox:\n  network: none\n  mounts:\n"
                             "    - {source: /etc/apt, target: /etc/apt}\n"
                             "    - {source: /var/lib/apt/lists, target: /var/lib/apt/lists, "
                             "read_only: true}\n",
                         "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  ASSERT_EQ(w->sandbox.mounts.size(), 2u);
  EXPECT_EQ(w->sandbox.mounts[0].source, "/etc/apt");
  EXPECT_EQ(w->sandbox.mounts[1].target, "/var/lib/apt/lists");
  EXPECT_EQ(
      problems(std::string(kHead) + "sandbox:\n  mounts:\n"
                                    "    - {source: /etc/apt, target: /etc/apt, read_only: false}\n"
                                    "    - {source: /etc/shadow, target: /srv/s}\n"
                                    "    - {source: /etc/../root, target: /proc/x}\n"
                                    "    - {source: /etc, target: /work/etc, mode: ro}\n"
                                    "    - {source: opt, target: /etc/ssl}\n"
                                    "    - {source: /opt, target: /etc/apt}\n"
                                    "    - {target: /srv}\n"),
      "p.yaml:6:55: sandbox.mounts are read-only always: leave out 'read_only: false'\n"
      "p.yaml:7:16: sandbox.mounts source '/etc/shadow' is (or is under) /etc/shadow, which "
      "holds secrets or host state\n"
      "p.yaml:8:16: sandbox.mounts source '/etc/../root' must be normalised (no '//', '.' or "
      "'..' parts)\n"
      "p.yaml:8:38: sandbox.mounts target '/proc/x' would hide or replace the sandbox's "
      "/proc\n"
      "p.yaml:9:16: sandbox.mounts source '/etc' contains /etc/shadow, which holds secrets "
      "or host state\n"
      "p.yaml:9:30: sandbox.mounts target '/work/etc' would hide or replace the sandbox's "
      "/work\n"
      "p.yaml:9:41: unknown key 'mode' in a sandbox.mounts entry (expected one of: source "
      "target read_only)\n"
      "p.yaml:10:16: sandbox.mounts source 'opt' must be an absolute path\n"
      "p.yaml:10:29: sandbox.mounts target '/etc/ssl' would hide or replace the sandbox's "
      "/etc/ssl/certs/ca-certificates.crt\n"
      "p.yaml:11:30: sandbox.mounts: target '/etc/apt' is given twice\n"
      "p.yaml:12:7: a sandbox.mounts entry needs 'source'\n");
}

// The rules, by name: what a mount may show and where.
TEST(HostMounts, SourcesHoldNoSecretsTargetsHideNothing) {
  for (const char* ok : {"/etc/apt", "/var/lib/apt/lists", "/opt/tools", "/etc/ssl/certs"})
    EXPECT_EQ(mountSourceProblem(ok), std::nullopt) << ok;
  for (const char* bad :
       {"/", "/etc", "/var", "/var/lib", "/run", "/etc/ssh/sshd_config", "/etc/ssl/private",
        "/etc/sudoers.d", "/root/.ssh", "/var/lib/sluice/audit.db", "/etc/sluice", "/proc/1",
        "/sys", "/dev/sda", "/etc/gshadow-", "/opt/", "/opt//x", "/opt/./x", "relative"})
    EXPECT_NE(mountSourceProblem(bad), std::nullopt) << bad;
  EXPECT_NE(mountSourceProblem("/srv/keys", {"/srv/keys"}), std::nullopt);
  EXPECT_NE(mountSourceProblem("/srv", {"/srv/keys"}), std::nullopt);
  for (const char* ok : {"/etc/apt", "/var/lib/apt/lists", "/opt/tools", "/home/x", "/srv",
                         "/etc/ssl/certs/extra.pem", "/run/x"})
    EXPECT_EQ(mountTargetProblem(ok), std::nullopt) << ok;
  for (const char* bad : {"/",
                          "/etc",
                          "/usr",
                          "/usr/local",
                          "/bin",
                          "/lib/x",
                          "/work",
                          "/work/a",
                          "/tmp/a",
                          "/output",
                          "/input/x",
                          "/var",
                          "/var/tmp",
                          "/var/cache/apt",
                          "/dev/shm",
                          "/proc/x",
                          "/sys",
                          "/etc/passwd",
                          "/etc/group",
                          "/etc/hosts",
                          "/etc/resolv.conf",
                          "/etc/ssl",
                          "/etc/ssl/certs",
                          "/etc/ssl/certs/ca-certificates.crt",
                          "/etc/ld.so.cache"})
    EXPECT_NE(mountTargetProblem(bad), std::nullopt) << bad;
}

TEST(Loader, AllowPrivateNeedsCidrs) {
  EXPECT_EQ(problems(rule("      hosts: [a.example]\n      allow_private: true\n")),
            "p.yaml:9:22: allow_private: true needs 'cidrs' naming the private ranges this rule "
            "may reach\n");
}

TEST(Loader, TopLevelRequirements) {
  EXPECT_EQ(problems("kind: Workflow\nname: x\n"), "p.yaml:1:1: missing 'apiVersion: sluice/v1'\n");
  EXPECT_EQ(problems("apiVersion: sluice/v2\nkind: Workflow\nname: x\n"),
            "p.yaml:1:13: apiVersion must be 'sluice/v1' (got 'sluice/v2')\n");
  EXPECT_NE(problems("apiVersion: sluice/v1\nkind: Workflow\nname: Has_Caps\n")
                .find("p.yaml:3:7: bad workflow name 'Has_Caps'"),
            std::string::npos);
  EXPECT_EQ(problems(""), "p.yaml:1:1: empty policy file\n");
  EXPECT_NE(problems("a: [\n").find("p.yaml:"), std::string::npos);  // YAML syntax error
}

// The check the loader makes of `name:` is the one `policy learn --name` makes too.
TEST(Loader, WorkflowNameBoundaries) {
  EXPECT_TRUE(isWorkflowName("a"));
  EXPECT_TRUE(isWorkflowName("0-learned-2"));
  EXPECT_TRUE(isWorkflowName(std::string(63, 'a')));
  EXPECT_FALSE(isWorkflowName(std::string(64, 'a')));
  EXPECT_FALSE(isWorkflowName(""));
  EXPECT_FALSE(isWorkflowName("-a"));
  EXPECT_FALSE(isWorkflowName("Has_Caps"));
  EXPECT_FALSE(isWorkflowName("a.b"));
}

TEST(Loader, ReportsEveryProblemInOnePass) {
  std::string yaml = std::string(kHead) +
                     "sandbox:\n  timeout: nope\n  network: wifi\n"
                     "egress:\n  rules:\n"
                     "    - {id: a, action: maybe, hosts: [\"*.com\"], ports: [0]}\n";
  auto w = parseWorkflow(yaml, "p.yaml");
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().diagnostics.size(), 5u) << w.error().str();
}

// What crosses into other components: one base::Error, kInvalidArgument, at the first problem,
// carrying every diagnostic as `policy check` prints them.
TEST(Loader, LoadErrorBecomesOneErrorAtTheFirstProblem) {
  std::string yaml = std::string(kHead) + "sandbox:\n  timeout: nope\n  network: wifi\n";
  auto w = parseWorkflow(yaml, "p.yaml");
  ASSERT_FALSE(w);
  const base::Error e = w.error().toError();
  EXPECT_EQ(e.code, base::Code::kInvalidArgument);
  EXPECT_EQ(e.where, "p.yaml:5:12");
  EXPECT_EQ(e.message + "\n", w.error().str());
  EXPECT_EQ(e.message,
            "p.yaml:5:12: sandbox.timeout: bad duration 'nope' (expected e.g. 30s, 2m, 1h)\n"
            "p.yaml:6:12: sandbox.network must be 'none' or 'proxy' (got 'wifi')");
  const LoadError no_position{{{"dir", {}, "not a directory"}}};
  EXPECT_EQ(no_position.toError().where, "dir");
}

class PolicyDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice-policy-dir-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
  }
  std::filesystem::path dir_;
};

TEST_F(PolicyDir, LoadsEveryYamlFile) {
  write("a.yaml", "apiVersion: sluice/v1\nkind: Workflow\nname: a\n");
  write("b.yml", "apiVersion: sluice/v1\nkind: Workflow\nname: b\n");
  write("notes.txt", "not a policy");
  auto set = loadPolicyDir(dir_);
  ASSERT_TRUE(set) << set.error().str();
  EXPECT_EQ(set->workflows.size(), 2u);
  EXPECT_NE(set->find("b"), nullptr);
}

TEST_F(PolicyDir, SameWorkflowTwiceIsAnError) {
  write("a.yaml", "apiVersion: sluice/v1\nkind: Workflow\nname: same\n");
  write("b.yaml", "apiVersion: sluice/v1\nkind: Workflow\nname: same\n");
  auto set = loadPolicyDir(dir_);
  ASSERT_FALSE(set);
  EXPECT_EQ(set.error().str(), (dir_ / "b.yaml").string() +
                                   ":3:7: workflow 'same' is already defined in " +
                                   (dir_ / "a.yaml").string() + "\n");
}

TEST_F(PolicyDir, OneBadFileFailsTheWholeDirectory) {
  write("a.yaml", "apiVersion: sluice/v1\nkind: Workflow\nname: good\n");
  write("b.yaml", "apiVersion: sluice/v1\nkind: Workflow\nname: bad\nsandbox: {pids: 0}\n");
  auto set = loadPolicyDir(dir_);
  ASSERT_FALSE(set);
  EXPECT_NE(set.error().str().find("b.yaml:4:17: sandbox.pids must be a positive integer"),
            std::string::npos);
}

TEST_F(PolicyDir, EmptyOrMissingDirectory) {
  EXPECT_FALSE(loadPolicyDir(dir_));
  EXPECT_FALSE(loadPolicyDir(dir_ / "missing"));
}

}  // namespace
}  // namespace sluice::policy

namespace sluice::policy {
namespace {

// sandbox.pool (sluice serve's warm pool): a count, 0 allowed; absent means serve's --pool.
TEST(Loader, SandboxPool) {
  auto w = parseWorkflow(std::string(kHead) + "sandbox:\n  pool: 3\n", "p.yaml");
  ASSERT_TRUE(w.has_value()) << w.error().str();
  EXPECT_EQ(w->sandbox.pool, 3u);
  auto none = parseWorkflow(std::string(kHead) + "sandbox:\n  pool: 0\n", "p.yaml");
  ASSERT_TRUE(none.has_value()) << none.error().str();
  EXPECT_EQ(none->sandbox.pool, 0u);
  auto unset = parseWorkflow(std::string(kHead), "p.yaml");
  ASSERT_TRUE(unset.has_value());
  EXPECT_FALSE(unset->sandbox.pool.has_value());
  auto bad = parseWorkflow(std::string(kHead) + "sandbox:\n  pool: -1\n", "p.yaml");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().str().find("p.yaml:5:9: sandbox.pool"), std::string::npos)
      << bad.error().str();
}

TEST(Loader, MaxDnsQueries) {
  const std::string head = "apiVersion: sluice/v1\nkind: Workflow\nname: wf\negress:\n  limits:\n";
  auto w = parseWorkflow(head + "    max_dns_queries: 7\n", "p.yaml");
  ASSERT_TRUE(w) << w.error().str();
  EXPECT_EQ(w->limits.max_dns_queries, 7u);
  EXPECT_FALSE(parseWorkflow(head + "    max_dns_queries: 0\n", "p.yaml"));
  EXPECT_FALSE(parseWorkflow(head + "    max_dns_query: 5\n", "p.yaml"));
}

}  // namespace
}  // namespace sluice::policy
