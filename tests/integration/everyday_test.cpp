// The everyday battery: ordinary programs a new user would run, each in a default sandbox through
// the real binary (`sluice run --policy P --audit DB -- bash -c SCRIPT`), each checked against
// the exact output it prints, not just its exit status. A case is skipped only when the host
// lacks the program (as the sandbox sees it: its PATH, /usr bound from the host) and neither
// CI=true nor SLUICE_REQUIRE_ISOLATION=1 is set; in CI scripts/install-deps.sh provides them.
//
// Network cases get a policy that allows exactly what they need:
// - pip installs from a local PEP 503 index (tests/integration/everyday/make_index.py: one
//   hand-made wheel) served by python's http.server in a network namespace the test makes
//   (10.237.0.2 over a veth pair, as netns_upstream.hpp does): the proxy's SSRF guard refuses
//   the host's loopback, so the index lives where a private mirror would, allowed by a
//   `cidrs` + `allow_private` rule;
// - npm installs a small real package from the registry the host's own npm is configured with
//   (`npm config get registry`: no registry host is named here), over a passthrough TLS rule
//   for that host; skipped, whatever the environment, when the host cannot reach it.
// - apt-get downloads a small package from the Debian mirror the host's apt is configured with
//   (`apt-get download --print-uris`: no mirror host is named here), with the host's /etc/apt,
//   package lists and dpkg database given read-only by the policy's `sandbox.mounts`, under a
//   method/path rule allowing only GET of the mirror's pool; skipped when the host cannot
//   reach the mirror or its lists lack the package.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "host_registries.hpp"
#include "isolation.hpp"
#include "netns_upstream.hpp"
#include "proc_scan.hpp"

namespace fs = std::filesystem;

namespace {

using sluice::testing::hostNpmRegistry;
using sluice::testing::NpmRegistry;
using sluice::testing::npmRegistryRule;
using sluice::testing::Outcome;
using sluice::testing::reachableRule;
using sluice::testing::shellOutput;

// The sandbox's PATH (docs/sandbox.md "Privileges"): a program counts as present on the host
// when the sandbox would find it there.
constexpr char kSandboxPath[] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// The local package index's upstream namespace and what it serves.
constexpr char kIndexSubnet[] = "10.237.0";
constexpr char kIndexAddress[] = "10.237.0.2";
constexpr char kIndexPackage[] = "sluicedemo";
constexpr char kIndexVersion[] = "1.2.3";

enum class Network { kNone, kLocalIndex, kNpmRegistry, kDebianMirror };

// The package apt-get downloads: tiny, in Debian's main for every release.
constexpr char kAptPackage[] = "hello";

struct EverydayCase {
  const char* name;
  const char* probe;  // host shell command (sandbox's PATH) that succeeds when the program exists
  Network network;
  const char* script;    // run as `bash -c SCRIPT` in the sandbox
  const char* expected;  // its whole stdout
};

// gtest prints a parameter in ctest's test names: the case's name, not its bytes.
void PrintTo(const EverydayCase& c, std::ostream* os) { *os << c.name; }

const EverydayCase kCases[] = {
    {"shell_builtins", "command -v sh && command -v bash", Network::kNone,
     R"SH(set -e
sh -c 'read a b <<EOF
3 4
EOF
echo "sh: $((a * b))"'
read -r first rest <<< "alpha beta gamma"
printf '%s|%s|%05.1f\n' "$first" "$rest" 3.14159
nums=(4 8 15 16 23 42); sum=0
for n in "${nums[@]}"; do ((sum += n)); done
declare -A colour=([sky]=blue [grass]=green)
echo "bash: ${#nums[@]} numbers, sum $sum, last ${nums[-1]}, sky ${colour[sky]}"
)SH",
     "sh: 12\nalpha|beta gamma|003.1\nbash: 6 numbers, sum 108, last 42, sky blue\n"},

    {"awk_sed_grep", "command -v awk && command -v sed && command -v grep", Network::kNone,
     R"SH(set -e
printf 'apple 3\nbanana 5\ncherry 7\n' > /work/fruit.txt
awk '{ total += $2 } END { print "total", total }' /work/fruit.txt
sed -n 's/^b\([a-z]*\) .*/B\1/p' /work/fruit.txt
sed -i 's/cherry/damson/' /work/fruit.txt
grep -c an /work/fruit.txt
grep -E '^d' /work/fruit.txt
)SH",
     "total 15\nBanana\n1\ndamson 7\n"},

    {"find_xargs", "command -v find && command -v xargs && command -v sort", Network::kNone,
     R"SH(set -e
mkdir -p /work/tree/a/b /work/tree/c
for f in a/one.txt a/b/two.txt c/three.txt c/skip.log; do echo "$f" > "/work/tree/$f"; done
find /work/tree -name '*.txt' -print0 | sort -z | xargs -0 cat
find /work/tree -type f | xargs wc -l | tail -n 1
)SH",
     "a/b/two.txt\na/one.txt\nc/three.txt\n 4 total\n"},

    // `which` and `awk` are Debian alternatives: symlinks through /etc/alternatives.
    {"which", "command -v which && command -v awk", Network::kNone,
     R"SH(set -e
which awk sed
which no-such-program-here || echo "not found: $?"
)SH",
     "/usr/bin/awk\n/usr/bin/sed\nnot found: 1\n"},

    {"tar_gzip", "command -v tar && command -v gzip", Network::kNone,
     R"SH(set -e
mkdir -p /work/pkg/sub
echo alpha > /work/pkg/a.txt
echo beta > /work/pkg/sub/b.txt
cd /work
tar -czf pkg.tar.gz pkg
gzip -t pkg.tar.gz
tar -tzf pkg.tar.gz | sort
mkdir /work/unpacked
tar -xzf pkg.tar.gz -C /work/unpacked
cat /work/unpacked/pkg/a.txt /work/unpacked/pkg/sub/b.txt
echo "round trip" | gzip -9 | gzip -dc
)SH",
     "pkg/\npkg/a.txt\npkg/sub/\npkg/sub/b.txt\nalpha\nbeta\nround trip\n"},

    // PIP_INDEX_URL and PIP_TRUSTED_HOST (plain HTTP) come from --env; the proxy variables
    // from sluice.
    {"python_venv_pip", "python3 -c 'import venv, ensurepip'", Network::kLocalIndex,
     R"SH(set -e
python3 -m venv /work/venv
/work/venv/bin/pip install --no-cache-dir --quiet sluicedemo >&2
/work/venv/bin/pip show sluicedemo | grep -E '^(Name|Version):'
/work/venv/bin/python -c 'import sluicedemo; print(sluicedemo.greet())'
)SH",
     "Name: sluicedemo\nVersion: 1.2.3\nhello from sluicedemo 1.2.3\n"},

    // npm_config_registry comes from --env (the host's npm configuration is not carried).
    {"npm_install", "command -v npm && command -v node", Network::kNpmRegistry,
     R"SH(set -e
mkdir /work/app && cd /work/app
npm init -y > /dev/null
npm install --no-audit --no-fund --loglevel=error is-number@7.0.0 >&2
node -e 'const isNumber = require("is-number");
console.log(isNumber(5), isNumber("five"), require("is-number/package.json").version)'
)SH",
     "true false 7.0.0\n"},

    // The host's apt configuration comes from the policy's read-only sandbox.mounts. The rule
    // allows GET of the mirror's pool only: `apt-get update` (its dists/) is refused.
    {"apt_get_download", "command -v apt-get && command -v dpkg-deb", Network::kDebianMirror,
     R"SH(set -e
cd /work
apt-get download hello >&2
ls hello_*.deb | wc -l
dpkg-deb -f hello_*.deb Package
(echo x > /etc/apt/sluice-test) 2>/dev/null || echo "/etc/apt read-only"
mkdir -p /work/lists/partial
apt-get -q -o Dir::State::Lists=/work/lists update > /dev/null 2>&1 || echo "update refused"
)SH",
     "1\nhello\n/etc/apt read-only\nupdate refused\n"},

    {"node", "command -v node", Network::kNone,
     R"SH(set -e
node -e 'const squares = [1, 2, 3, 4].map((x) => x * x);
console.log(squares.join(","), squares.reduce((a, b) => a + b));
console.log(require("crypto").createHash("sha256").update("sluice").digest("hex"));
require("fs").writeFileSync("/work/n.json", JSON.stringify({ ok: true }));
console.log(require("fs").readFileSync("/work/n.json", "utf8"))'
)SH",
     "1,4,9,16 30\n"
     "0f5aec3c8edf964bb5260e4ae806d31feaab06f39a65ddba9d86e499bfae8476\n"
     "{\"ok\":true}\n"},

    // A local clone hard-links the objects from /work/src into /work/clone.
    {"git_init_commit_clone", "command -v git", Network::kNone,
     R"SH(set -e
mkdir /work/src && cd /work/src
git init -q -b main
echo hello > greeting.txt
git add greeting.txt
git -c user.name=t -c user.email=t@e commit -q -m 'first commit'
git clone -q /work/src /work/clone
cd /work/clone
git log --format='%an <%ae> %s'
cat greeting.txt
test "$(git rev-parse HEAD)" = "$(git -C /work/src rev-parse HEAD)" && echo "same head"
)SH",
     "t <t@e> first commit\nhello\nsame head\n"},

    {"make_cc", "command -v make && command -v cc && test -e /usr/include/stdio.h", Network::kNone,
     R"SH(set -e
mkdir /work/c && cd /work/c
cat > squares.c <<'EOF'
#include <stdio.h>
int main(void) {
  int sum = 0;
  for (int i = 1; i <= 10; i++) sum += i * i;
  printf("sum of squares 1..10 = %d\n", sum);
  return 0;
}
EOF
printf 'squares: squares.c\n\t$(CC) -O2 -o $@ $<\n' > Makefile
make -s
./squares
make -s && echo "nothing to rebuild"
)SH",
     "sum of squares 1..10 = 385\nnothing to rebuild\n"},
};

class EverydayProgram : public ::testing::TestWithParam<EverydayCase> {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sluice-ev-" + std::to_string(::getpid()) + "-" + GetParam().name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    index_.stop();
    fs::remove_all(dir_);
  }

  /// "" when the host has the program as the sandbox would see it, else why not.
  static std::string missingProgram(const EverydayCase& c) {
    auto [rc, out] = shellOutput(std::string("env PATH=") + kSandboxPath + " sh -c '" +
                                 escapeQuote(c.probe) + "' >/dev/null");
    return rc == 0 ? "" : std::string("not on this host: ") + c.probe + " " + out;
  }

  /// Starts the local package index in its namespace; "" on success.
  std::string startLocalIndex() {
    auto [rc, out] = shellOutput(
        "/usr/bin/python3 " SLUICE_SOURCE_DIR "/tests/integration/everyday/make_index.py " +
        (dir_ / "index").string() + " " + kIndexPackage + " " + kIndexVersion);
    if (rc != 0) return "cannot build the index: " + out;
    const std::string ip = kIndexAddress;
    return index_.start(
        "sluice-ev-" + std::to_string(::getpid()), "ev", kIndexSubnet,
        {"-m", "http.server", "8080", "--bind", ip, "--directory", (dir_ / "index").string()},
        "http://" + ip + ":8080/simple/", kIndexPackage);
  }

  static std::string escapeQuote(const std::string& s) {
    std::string r;
    for (char ch : s) r += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return r;
  }

  /// Writes policy.yaml: a default sandbox (longer timeouts: a venv or an npm install on a
  /// loaded machine takes a while) with `rules` (YAML list items, may be empty).
  /// `mounts`: sandbox.mounts list items, may be empty.
  std::string writePolicy(const std::string& rules, const std::string& mounts = "") {
    const fs::path p = dir_ / "policy.yaml";
    std::ofstream(p) << "apiVersion: sluice/v1\nkind: Workflow\nname: everyday\n"
                        "sandbox:\n  timeout: 180s\n  cpu_time: 120s\n  network: proxy\n"
                     << (mounts.empty() ? "" : "  mounts:\n" + mounts)
                     << (rules.empty() ? "" : "egress:\n  rules:\n" + rules);
    return p.string();
  }

  Outcome run(const std::string& policy, const std::vector<std::string>& env,
              const std::string& script) {
    std::vector<std::string> args = {"run", "--policy", policy, "--audit",
                                     (dir_ / "audit.db").string()};
    for (const auto& e : env) args.insert(args.end(), {"--env", e});
    args.insert(args.end(), {"--", "bash", "-c", script});
    return sluice::testing::runBinary(SLUICE_BINARY, dir_, args);
  }

  fs::path dir_;
  sluice::testing::NetnsUpstream index_;
};

/// The rule for the Debian mirror the host's apt downloads kAptPackage from: GET of its pool
/// only. Returns "" and fills `rule`, or why the case cannot run here. apt names the mirror
/// (`apt-get download --print-uris`); the host downloading the package proves it reachable.
std::string hostDebianMirrorRule(const fs::path& dir, std::string& rule) {
  auto [rc, line] = shellOutput(std::string("apt-get download --print-uris ") + kAptPackage +
                                " 2>/dev/null | head -1");
  if (rc != 0 || line.rfind("'", 0) != 0)
    return std::string("the host's apt lists have no package ") + kAptPackage + ": " + line;
  const std::string url = line.substr(1, line.find('\'', 1) - 1);  // 'URL' FILE SIZE HASH
  sluice::testing::UrlParts mirror;
  if (const std::string why = sluice::testing::splitUrl(url, mirror); !why.empty())
    return "the host's apt mirror URL cannot be used: " + why;  // not the URL: credentials
  const bool https = url.starts_with("https://");
  const auto pool = mirror.path.find("/pool/");
  if (pool == std::string::npos) return "the host's apt mirror has no /pool/: " + url;
  const std::string &host = mirror.host, &port = mirror.port, &path = mirror.path;
  fs::create_directories(dir / "host-apt");
  auto [drc, dout] = shellOutput("cd " + (dir / "host-apt").string() +
                                 " && timeout 60 apt-get download " + kAptPackage + " 2>&1");
  fs::remove_all(dir / "host-apt");
  if (drc != 0) return "the host's apt mirror is unreachable from this machine: " + dout;
  // Methods and paths over HTTPS need the proxy to see the requests: tls: inspect.
  rule = reachableRule("    - id: debian-mirror\n      action: allow\n      hosts: [\"" + host +
                           "\"]\n      ports: [" + port +
                           "]\n      methods: [GET]\n"
                           "      paths: [\"" +
                           path.substr(0, pool) + "/pool/*\"]\n" +
                           (https ? "      tls: inspect\n" : ""),
                       host, port, dir);
  return "";
}

// What apt reads, read-only: its configuration and keys, the package lists, dpkg's database.
constexpr char kAptMounts[] =
    "    - {source: /etc/apt, target: /etc/apt}\n"
    "    - {source: /var/lib/apt/lists, target: /var/lib/apt/lists}\n"
    "    - {source: /var/lib/dpkg, target: /var/lib/dpkg}\n";

TEST_P(EverydayProgram, PrintsWhatItPrintsOnTheHost) {
  const EverydayCase& c = GetParam();
  REQUIRE_SANDBOX();
  if (const std::string why = missingProgram(c); !why.empty()) {
    if (isolationRequired()) FAIL() << why << " (scripts/install-deps.sh installs it)";
    GTEST_SKIP() << why;
  }
  std::string rules;
  std::vector<std::string> env;
  if (c.network == Network::kLocalIndex) {
    REQUIRE_ROOT();
    ASSERT_EQ(startLocalIndex(), "");
    rules = std::string("    - {id: local-index, action: allow, cidrs: [\"") + kIndexAddress +
            "/32\"], allow_private: true, ports: [8080]}\n";
    env = {std::string("PIP_INDEX_URL=http://") + kIndexAddress + ":8080/simple/",
           std::string("PIP_TRUSTED_HOST=") + kIndexAddress, "PIP_DISABLE_PIP_VERSION_CHECK=1"};
  }
  if (c.network == Network::kNpmRegistry) {
    NpmRegistry reg;
    if (const std::string why = hostNpmRegistry(dir_, reg); !why.empty()) GTEST_SKIP() << why;
    rules = npmRegistryRule(reg, dir_);
    env = {"npm_config_registry=" + reg.url, "npm_config_update_notifier=false"};
  }
  std::string mounts;
  if (c.network == Network::kDebianMirror) {
    if (const std::string why = hostDebianMirrorRule(dir_, rules); !why.empty())
      GTEST_SKIP() << why;
    mounts = kAptMounts;
  }
  const std::string policy = writePolicy(rules, mounts);
  Outcome o = run(policy, env, c.script);
  EXPECT_EQ(o.status, 0) << o.err << "policy:\n"
                         << std::string(
                                std::istreambuf_iterator<char>(std::ifstream(policy).rdbuf()), {});
  EXPECT_EQ(o.out, c.expected) << "stderr (the program's, then sluice's):\n" << o.err;
}

INSTANTIATE_TEST_SUITE_P(Everyday, EverydayProgram, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<EverydayCase>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
