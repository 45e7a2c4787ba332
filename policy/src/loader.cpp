// YAML -> Workflow: parse once with yaml-cpp, validate everything with line/column positions,
// report every problem in one pass. Nothing half-loaded is ever returned.
#include "sluice/policy/loader.hpp"

#include <re2/re2.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "host_pattern.hpp"
#include "inject_aws_sigv4.hpp"
#include "inject_hmac.hpp"
#include "inject_tokens.hpp"
#include "sluice/base/digest.hpp"
#include "sluice/policy/host_mounts.hpp"
#include "sluice/policy/units.hpp"

namespace sluice::policy {
namespace {

bool isHttpToken(std::string_view s) {
  if (s.empty()) return false;
  static constexpr std::string_view kExtra = "!#$%&'*+-.^_`|~";
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || kExtra.find(c) != std::string_view::npos;
  });
}

bool isSecretName(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

bool isEnvName(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// [A-Za-z0-9][A-Za-z0-9_.-]{0,62}
bool isRuleId(std::string_view s) {
  if (s.empty() || s.size() > 63 || !std::isalnum(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

using Keys = std::initializer_list<std::string_view>;

class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  std::vector<Diagnostic>& diagnostics() { return diags_; }

  void errorAt(const YAML::Mark& m, std::string message) {
    SourcePos pos;
    if (m.line >= 0) pos = {m.line + 1, m.column + 1};
    diags_.push_back({file_, pos, std::move(message)});
  }
  void error(const YAML::Node& n, std::string message) { errorAt(n.Mark(), std::move(message)); }
  // Not a load error: kept with the workflow and printed by `policy check`.
  void warning(const YAML::Node& n, std::string message) {
    SourcePos pos;
    if (n.Mark().line >= 0) pos = {n.Mark().line + 1, n.Mark().column + 1};
    warnings_.push_back({file_, pos, "warning: " + std::move(message)});
  }
  std::vector<Diagnostic>& warnings() { return warnings_; }

  // Checks a mapping's keys: unknown (with a suggestion) and duplicated ones.
  bool checkMap(const YAML::Node& n, std::string_view what, Keys allowed) {
    if (!n.IsMap()) {
      error(n, std::string(what) + " must be a mapping");
      return false;
    }
    std::set<std::string> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (!it->first.IsScalar()) {
        error(it->first, "keys in " + std::string(what) + " must be plain names");
        continue;
      }
      std::string key = it->first.Scalar();
      if (!seen.insert(key).second) {
        error(it->first, "duplicate key '" + key + "' in " + std::string(what));
        continue;
      }
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      std::string best;
      std::size_t best_d = 3;
      for (auto k : allowed) {
        std::size_t d = editDistance(key, k);
        if (d < best_d && d <= std::max<std::size_t>(1, k.size() / 3)) {
          best_d = d;
          best = std::string(k);
        }
      }
      std::string msg = "unknown key '" + key + "' in " + std::string(what);
      if (!best.empty()) {
        msg += " (did you mean '" + best + "'?)";
      } else {
        msg += " (expected one of:";
        for (auto k : allowed) msg += " " + std::string(k);
        msg += ")";
      }
      error(it->first, msg);
    }
    return true;
  }

  std::optional<std::string> str(const YAML::Node& n, std::string_view what) {
    if (!n.IsScalar()) {
      error(n, std::string(what) + " must be a string");
      return std::nullopt;
    }
    return n.Scalar();
  }

  std::optional<bool> boolean(const YAML::Node& n, std::string_view what) {
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      if (s == "true") return true;
      if (s == "false") return false;
    }
    error(n, std::string(what) + " must be true or false");
    return std::nullopt;
  }

  std::optional<std::uint64_t> count(const YAML::Node& n, std::string_view what, bool zero_ok) {
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      if (!s.empty() && std::all_of(s.begin(), s.end(), ::isdigit) && s.size() <= 18) {
        std::uint64_t v = std::stoull(s);
        if (v > 0 || zero_ok) return v;
      }
    }
    error(n,
          std::string(what) + " must be a " + (zero_ok ? "non-negative" : "positive") + " integer");
    return std::nullopt;
  }

  std::optional<std::uint64_t> size(const YAML::Node& n, std::string_view what) {
    if (!n.IsScalar()) {
      error(n, std::string(what) + " must be a size such as 512MiB or 1GB");
      return std::nullopt;
    }
    auto v = parseSize(n.Scalar());
    if (!v) {
      error(n, std::string(what) + ": " + v.error());
      return std::nullopt;
    }
    if (*v == 0) {
      error(n, std::string(what) + " must be more than zero");
      return std::nullopt;
    }
    return *v;
  }

  std::optional<std::chrono::milliseconds> duration(const YAML::Node& n, std::string_view what) {
    if (!n.IsScalar()) {
      error(n, std::string(what) + " must be a duration such as 30s, 2m or 1h");
      return std::nullopt;
    }
    auto v = parseDuration(n.Scalar());
    if (!v) {
      error(n, std::string(what) + ": " + v.error());
      return std::nullopt;
    }
    if (v->count() == 0) {
      error(n, std::string(what) + " must be more than zero");
      return std::nullopt;
    }
    return *v;
  }

  // A non-empty sequence; each element is passed to `each`.
  template <typename F>
  void list(const YAML::Node& n, std::string_view what, F each) {
    if (!n.IsSequence()) {
      error(n, std::string(what) + " must be a list");
      return;
    }
    if (n.size() == 0) {
      error(n, std::string(what) + " must not be empty (leave the key out instead)");
      return;
    }
    for (const auto& item : n) each(item);
  }

  void parseSandbox(const YAML::Node& n, SandboxLimits& s) {
    if (!checkMap(n, "sandbox",
                  {"timeout", "cpu_time", "memory", "pids", "output", "disk", "file_size",
                   "open_files", "network", "pool", "mounts"})) {
      return;
    }
    if (auto v = n["timeout"]) {
      if (auto d = duration(v, "sandbox.timeout")) s.timeout = *d;
    }
    if (auto v = n["cpu_time"]) {
      if (auto d = duration(v, "sandbox.cpu_time")) s.cpu_time = *d;
    }
    if (auto v = n["memory"]) {
      if (auto x = size(v, "sandbox.memory")) s.memory = *x;
    }
    if (auto v = n["pids"]) {
      if (auto x = count(v, "sandbox.pids", false)) s.pids = *x;
    }
    if (auto v = n["output"]) {
      if (auto x = size(v, "sandbox.output")) s.output = *x;
    }
    if (auto v = n["disk"]) {
      if (auto x = size(v, "sandbox.disk")) s.disk = *x;
    }
    if (auto v = n["file_size"]) {
      if (auto x = size(v, "sandbox.file_size")) s.file_size = *x;
    }
    if (auto v = n["open_files"]) {
      if (auto x = count(v, "sandbox.open_files", false)) s.open_files = *x;
    }
    if (auto v = n["pool"]) {
      if (auto x = count(v, "sandbox.pool", true)) s.pool = *x;
    }
    if (auto v = n["mounts"]) {
      list(v, "sandbox.mounts", [&](const YAML::Node& m) { parseMount(m, s.mounts); });
    }
    if (auto v = n["network"]) {
      auto x = str(v, "sandbox.network");
      if (x == "none") {
        s.network = NetworkMode::kNone;
      } else if (x == "proxy") {
        s.network = NetworkMode::kProxy;
      } else if (x) {
        error(v, "sandbox.network must be 'none' or 'proxy' (got '" + *x + "')");
      }
    }
  }

  // One `sandbox.mounts` entry: {source, target[, read_only: true]}; read-only always.
  void parseMount(const YAML::Node& n, std::vector<HostMount>& mounts) {
    if (!checkMap(n, "a sandbox.mounts entry", {"source", "target", "read_only"})) return;
    HostMount m;
    const bool ok = mountPath(n, "source", m.source) & mountPath(n, "target", m.target);
    if (auto v = n["read_only"]) {
      if (auto ro = boolean(v, "read_only"); ro && !*ro)
        error(v, "sandbox.mounts are read-only always: leave out 'read_only: false'");
    }
    if (!ok) return;
    for (const HostMount& other : mounts) {
      if (other.target == m.target)
        error(n["target"], "sandbox.mounts: target '" + m.target + "' is given twice");
    }
    mounts.push_back(std::move(m));
  }

  // A mount's `source` or `target`, checked by the rules of host_mounts.hpp.
  bool mountPath(const YAML::Node& n, const char* key, std::string& out) {
    const YAML::Node v = n[key];
    if (!v) {
      error(n, std::string("a sandbox.mounts entry needs '") + key + "'");
      return false;
    }
    auto s = str(v, std::string("sandbox.mounts ") + key);
    if (!s) return false;
    auto problem =
        std::string_view(key) == "source" ? mountSourceProblem(*s) : mountTargetProblem(*s);
    if (problem) {
      error(v, std::string("sandbox.mounts ") + key + " '" + *s + "' " + *problem);
      return false;
    }
    out = *s;
    return true;
  }

  void parseLimits(const YAML::Node& n, EgressLimits& l) {
    if (!checkMap(n, "egress.limits",
                  {"max_connections", "max_bytes_out", "max_bytes_in", "max_requests",
                   "max_dns_queries"})) {
      return;
    }
    if (auto v = n["max_connections"]) {
      if (auto x = count(v, "egress.limits.max_connections", false)) l.max_connections = *x;
    }
    if (auto v = n["max_requests"]) {
      if (auto x = count(v, "egress.limits.max_requests", false)) l.max_requests = *x;
    }
    if (auto v = n["max_dns_queries"]) {
      if (auto x = count(v, "egress.limits.max_dns_queries", false)) l.max_dns_queries = *x;
    }
    if (auto v = n["max_bytes_out"]) {
      if (auto x = size(v, "egress.limits.max_bytes_out")) l.max_bytes_out = *x;
    }
    if (auto v = n["max_bytes_in"]) {
      if (auto x = size(v, "egress.limits.max_bytes_in")) l.max_bytes_in = *x;
    }
  }

  void parsePorts(const YAML::Node& n, Rule& r) {
    r.ports_given = true;
    list(n, "ports", [&](const YAML::Node& p) {
      if (!p.IsScalar()) {
        error(p, "a port must be a number or a range such as \"8000-8100\"");
        return;
      }
      const std::string& s = p.Scalar();
      auto parseOne = [](std::string_view t) -> int {
        if (t.empty() || t.size() > 5 || !std::all_of(t.begin(), t.end(), ::isdigit)) return -1;
        int v = std::stoi(std::string(t));
        return v >= 1 && v <= 65535 ? v : -1;
      };
      auto dash = s.find('-');
      if (dash == std::string::npos) {
        int v = parseOne(s);
        if (v < 0) {
          error(p, "bad port '" + s + "' (expected 1-65535)");
          return;
        }
        r.ports.push_back({static_cast<std::uint16_t>(v), static_cast<std::uint16_t>(v)});
        return;
      }
      int lo = parseOne(std::string_view(s).substr(0, dash));
      int hi = parseOne(std::string_view(s).substr(dash + 1));
      if (lo < 0 || hi < 0) {
        error(p, "bad port range '" + s + "' (expected e.g. \"8000-8100\", ports 1-65535)");
        return;
      }
      if (lo > hi) {
        error(p, "bad port range '" + s + "': " + std::to_string(lo) + " is more than " +
                     std::to_string(hi));
        return;
      }
      r.ports.push_back({static_cast<std::uint16_t>(lo), static_cast<std::uint16_t>(hi)});
    });
  }

  // Validates `${secret:NAME}` references in a header template, collecting the names.
  void parseTemplate(const YAML::Node& n, const std::string& value, std::set<std::string>& names) {
    std::size_t i = 0;
    while ((i = value.find("${", i)) != std::string::npos) {
      auto close = value.find('}', i);
      if (close == std::string::npos) {
        error(n, "unterminated '${' in header value (write ${secret:NAME})");
        return;
      }
      std::string_view ref = std::string_view(value).substr(i + 2, close - i - 2);
      if (!ref.starts_with("secret:")) {
        error(n, "unknown reference '${" + std::string(ref) +
                     "}' in header value (only ${secret:NAME} is supported)");
      } else if (!isSecretName(ref.substr(7))) {
        error(n, "bad secret name '" + std::string(ref.substr(7)) +
                     "' in ${secret:...} (letters, digits, '_', '-', '.')");
      } else {
        names.insert(std::string(ref.substr(7)));
      }
      i = close + 1;
    }
  }

  void parseInject(const YAML::Node& n, Rule& r) {
    if (!checkMap(n, "inject",
                  {"headers", "placeholder_env", "oauth2", "google_service_account", "aws_sigv4",
                   "hmac"}))
      return;
    std::set<std::string> names;
    if (auto h = n["headers"]) {
      if (!h.IsMap() || h.size() == 0) {
        error(h, "inject.headers must be a non-empty mapping of header name to value");
      } else {
        for (auto it = h.begin(); it != h.end(); ++it) {
          auto name = str(it->first, "header name");
          auto value = str(it->second, "header value");
          if (!name || !value) continue;
          if (!isHttpToken(*name)) {
            error(it->first, "'" + *name + "' is not a valid HTTP header name");
            continue;
          }
          std::string lower = *name;
          std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
          static constexpr std::string_view kForbidden[] = {"host",
                                                            "content-length",
                                                            "transfer-encoding",
                                                            "connection",
                                                            "upgrade",
                                                            "te",
                                                            "trailer",
                                                            "keep-alive",
                                                            "proxy-connection",
                                                            "proxy-authorization"};
          if (std::find(std::begin(kForbidden), std::end(kForbidden), lower) !=
              std::end(kForbidden)) {
            error(it->first, "header '" + *name + "' cannot be injected (framing or hop-by-hop)");
            continue;
          }
          if (value->find_first_of("\r\n") != std::string::npos) {
            error(it->second, "header value must not contain line breaks");
            continue;
          }
          parseTemplate(it->second, *value, names);
          r.inject.headers.emplace_back(*name, *value);
        }
      }
    }
    if (auto p = n["placeholder_env"]) {
      if (auto v = str(p, "inject.placeholder_env")) {
        if (!isEnvName(*v)) {
          error(p, "inject.placeholder_env '" + *v + "' is not a valid environment variable name");
        } else if (names.size() != 1) {
          error(p,
                "inject.placeholder_env needs exactly one ${secret:NAME} in inject.headers "
                "(it stands in for that secret)");
        } else {
          r.inject.placeholder_env = *v;
        }
      }
    }
    parseInjectTokens(n, r, names, injectContext());
    if (auto a = n["aws_sigv4"]) parseInjectAwsSigv4(a, r.inject, names, injectContext());
    if (auto h = n["hmac"]) r.inject.hmac = parseInjectHmac(h, names, injectContext());
    r.inject.secret_names.assign(names.begin(), names.end());
  }

  // What the parsers of `inject:` keys in their own files (inject_*.cpp) borrow.
  InjectParseContext injectContext() {
    return {[this](const YAML::Node& n, std::string m) { error(n, std::move(m)); },
            [this](SourcePos pos, std::string m) {
              diags_.push_back({file_, pos, std::move(m)});
            },
            [this](const YAML::Node& n, std::string_view what, Keys keys) {
              return checkMap(n, what, keys);
            },
            [this](const YAML::Node& n, const std::string& v, std::set<std::string>& names) {
              parseTemplate(n, v, names);
            }};
  }

  // `paths_case: sensitive | insensitive` and `path_params: refuse | allow`.
  void parsePathOptions(const YAML::Node& n, Rule& r) {
    if (auto v = n["paths_case"]) {
      auto s = str(v, "paths_case");
      if (s == "insensitive" || s == "sensitive") {
        r.paths_case_insensitive = s == "insensitive";
        r.paths_case_given = true;
      } else if (s) {
        error(v, "paths_case must be 'sensitive' or 'insensitive' (got '" + *s + "')");
      }
    }
    if (auto v = n["path_params"]) {
      auto s = str(v, "path_params");
      if (s == "allow" || s == "refuse") {
        r.path_params_allowed = s == "allow";
      } else if (s) {
        error(v, "path_params must be 'refuse' or 'allow' (got '" + *s + "')");
      }
    }
  }

  // Cross-field checks of paths_case and path_params.
  void checkPathOptions(const YAML::Node& n, const Rule& r) {
    if (n["paths_case"] && r.paths.empty()) {
      error(n["paths_case"], "'paths_case' on rule '" + r.id + "' has no effect without 'paths'");
    }
    if (r.action == Action::kDeny && n["path_params"]) {
      error(n["path_params"], "'path_params' on deny rule '" + r.id +
                                  "' has no effect (a deny rule always matches a path both with "
                                  "and without its ';' parameters)");
    }
    if (r.action != Action::kAllow && !r.paths.empty() && !r.paths_case_given) {
      // Not an error: many upstreams are case-sensitive. But a case-insensitive one (IIS,
      // Windows file servers, some frameworks) would serve a request this rule lets past (a
      // deny rule), or lets an allow rule next to it decide without the approver (an ask rule).
      const bool deny = r.action == Action::kDeny;
      warning(n["paths"], std::string(deny ? "deny" : "ask") + " rule '" + r.id +
                              "' names paths without 'paths_case': a case-insensitive upstream "
                              "would route /V1/ADMIN as /v1/admin, which this rule does not " +
                              (deny ? "deny" : "ask about") +
                              "; set 'paths_case: insensitive' to " +
                              (deny ? "deny" : "ask about") +
                              " every spelling, or 'paths_case: sensitive' if the upstream is "
                              "case-sensitive");
    }
  }

  // One rule: each field in turn, then the checks across fields, only when every field was
  // valid (a typo in one field should not bring a cascade of consequential errors).
  void parseRule(const YAML::Node& n, Workflow& w, std::set<std::string>& ids) {
    if (!checkMap(n, "rule",
                  {"id", "action", "hosts", "ports", "cidrs", "allow_private", "tls", "methods",
                   "paths", "paths_case", "path_params", "inject", "allow_plaintext_credentials",
                   "allow_get_body", "ask"})) {
      return;
    }
    Rule r;
    r.pos = {n.Mark().line + 1, n.Mark().column + 1};
    const std::size_t errors_before = diags_.size();
    parseRuleId(n, r, ids);
    parseAction(n, r);
    if (auto v = n["ask"]) parseAsk(v, r);
    if (auto v = n["hosts"]) parseHosts(v, r);
    if (auto v = n["ports"]) {
      parsePorts(v, r);
    } else {
      r.ports = {{80, 80}, {443, 443}};
    }
    if (auto v = n["cidrs"]) parseCidrs(v, r);
    if (auto v = n["allow_private"]) parseAllowPrivate(n, v, r);
    if (auto v = n["tls"]) parseTls(v, r);
    if (auto v = n["methods"]) parseMethods(v, r);
    if (auto v = n["paths"]) parsePaths(v, r);
    parsePathOptions(n, r);
    if (auto v = n["inject"]) parseInject(v, r);
    if (auto v = n["allow_plaintext_credentials"]) {
      if (auto b = boolean(v, "allow_plaintext_credentials")) r.allow_plaintext_credentials = *b;
    }
    if (auto v = n["allow_get_body"]) {
      if (auto b = boolean(v, "allow_get_body")) r.allow_get_body = *b;
    }
    if (diags_.size() == errors_before) checkRule(n, r);
    w.rules.push_back(std::move(r));
  }

  void parseRuleId(const YAML::Node& n, Rule& r, std::set<std::string>& ids) {
    auto v = n["id"];
    if (!v) {
      error(n, "rule has no 'id'");
      return;
    }
    if (auto s = str(v, "rule id")) {
      if (!isRuleId(*s)) {
        error(v, "bad rule id '" + *s + "' (letters, digits, '-', '_', '.'; at most 63)");
      } else if (!ids.insert(*s).second) {
        error(v, "duplicate rule id '" + *s + "'");
      }
      r.id = *s;
    }
  }

  void parseAction(const YAML::Node& n, Rule& r) {
    auto v = n["action"];
    if (!v) {
      error(n, "rule '" + r.id + "' has no 'action' (allow, deny or ask)");
      return;
    }
    auto s = str(v, "action");
    if (s == "allow") {
      r.action = Action::kAllow;
    } else if (s == "deny") {
      r.action = Action::kDeny;
    } else if (s == "ask") {
      r.action = Action::kAsk;
    } else if (s) {
      error(v, "action must be 'allow', 'deny' or 'ask' (got '" + *s + "')");
    }
  }

  void parseAsk(const YAML::Node& v, Rule& r) {
    if (!checkMap(v, "ask", {"timeout"})) return;
    auto t = v["timeout"];
    if (!t) return;
    if (auto d = duration(t, "ask.timeout")) {
      if (d->count() <= 0 || *d > std::chrono::hours(24)) {
        error(t, "ask.timeout must be more than 0 and at most 24h");
      } else {
        r.ask_timeout = *d;
      }
    }
  }

  void parseHosts(const YAML::Node& v, Rule& r) {
    list(v, "hosts", [&](const YAML::Node& h) {
      auto s = str(h, "host pattern");
      if (!s) return;
      auto p = detail::parseHostPattern(*s);
      if (!p) {
        error(h, p.error());
        return;
      }
      p->pos = {h.Mark().line + 1, h.Mark().column + 1};
      r.hosts.push_back(std::move(*p));
    });
  }

  void parseCidrs(const YAML::Node& v, Rule& r) {
    list(v, "cidrs", [&](const YAML::Node& c) {
      auto s = str(c, "CIDR");
      if (!s) return;
      auto cidr = parseCidr(*s);
      if (!cidr) {
        error(c, cidr.error());
        return;
      }
      r.cidrs.push_back(*cidr);
    });
  }

  void parseAllowPrivate(const YAML::Node& n, const YAML::Node& v, Rule& r) {
    if (auto b = boolean(v, "allow_private")) r.allow_private = *b;
    if (r.allow_private && !n["cidrs"]) {
      error(v, "allow_private: true needs 'cidrs' naming the private ranges this rule may reach");
    }
  }

  void parseTls(const YAML::Node& v, Rule& r) {
    auto s = str(v, "tls");
    if (s == "inspect") {
      r.tls = TlsMode::kInspect;
    } else if (s == "passthrough") {
      r.tls = TlsMode::kPassthrough;
    } else if (s) {
      error(v, "tls must be 'passthrough' or 'inspect' (got '" + *s + "')");
    }
  }

  void parseMethods(const YAML::Node& v, Rule& r) {
    list(v, "methods", [&](const YAML::Node& m) {
      auto s = str(m, "method");
      if (!s) return;
      if (!isHttpToken(*s)) {
        error(m, "'" + *s + "' is not an HTTP method");
        return;
      }
      std::string up = *s;
      std::transform(up.begin(), up.end(), up.begin(), ::toupper);
      if (up == "CONNECT") {
        error(m, "CONNECT is decided by hosts and ports, not methods");
        return;
      }
      r.methods.push_back(up);
    });
  }

  void parsePaths(const YAML::Node& v, Rule& r) {
    list(v, "paths", [&](const YAML::Node& p) {
      auto s = str(p, "path pattern");
      if (!s) return;
      if (auto pp = pathPattern(p, *s)) r.paths.push_back(std::move(*pp));
    });
  }

  // "re:..." (an RE2 expression) or a glob starting with '/' (or "*").
  std::optional<PathPattern> pathPattern(const YAML::Node& p, const std::string& s) {
    PathPattern pp;
    pp.text = s;
    if (!s.starts_with("re:")) {
      if (s.empty() || (s.front() != '/' && s != "*")) {
        error(p, "path pattern '" + s + "' must start with '/' (or use re:...)");
        return std::nullopt;
      }
      pp.pattern = s;
      return pp;
    }
    pp.regex = true;
    pp.pattern = s.substr(3);
    RE2::Options o;
    o.set_log_errors(false);
    RE2 re(pp.pattern, o);
    if (pp.pattern.empty() || !re.ok()) {
      error(p, "invalid regular expression '" + pp.pattern +
                   "': " + (pp.pattern.empty() ? std::string("empty") : re.error()));
      return std::nullopt;
    }
    return pp;
  }

  // Checks across a rule's fields (all of them valid): what it must name, what it cannot
  // enforce, what has no effect for its action.
  void checkRule(const YAML::Node& n, const Rule& r) {
    if (r.hosts.empty() && r.cidrs.empty()) {
      error(n, "rule '" + r.id + "' names neither 'hosts' nor 'cidrs'");
    }
    const bool https_only = r.tls == TlsMode::kPassthrough && !r.ports.empty() &&
                            std::all_of(r.ports.begin(), r.ports.end(), [](const PortRange& p) {
                              return p.lo == 443 && p.hi == 443;
                            });
    if (https_only) checkEnforceableThroughTls(n, r);
    checkNoEffect(n, r);
    checkPathOptions(n, r);
    if (passesTlsUnjudged(r) && !https_only) {
      // Not an error: plain HTTP to these ports (also inside a CONNECT tunnel) is judged
      // per request. But TLS tunnelled through cannot be, and a reviewer should know.
      const char* key = n["methods"] ? "methods" : "paths";
      warning(n[key], "rule '" + r.id + "' restricts " + key +
                          " with tls: passthrough: plain HTTP to ports " + r.portsText() +
                          " is judged per request, but TLS tunnelled through to them is not; "
                          "add 'tls: inspect' to enforce it on HTTPS");
    }
  }

  // Whether TLS that another rule tunnels through escapes this rule's request conditions.
  // Only a deny rule's: an allow or ask rule with conditions never grants a passthrough TLS
  // tunnel (it is refused, inspection_required), so nothing escapes it. And not on a rule for
  // port 80 only: TLS is not spoken there.
  static bool passesTlsUnjudged(const Rule& r) {
    if (r.action != Action::kDeny || !r.hasRequestConditions()) return false;
    if (r.tls != TlsMode::kPassthrough) return false;
    return std::any_of(r.ports.begin(), r.ports.end(),
                       [](const PortRange& p) { return p.lo != 80 || p.hi != 80; });
  }

  // A workflow whose traffic goes to the proxy but that has no allow or ask rule: every
  // connection is refused. Likely a forgotten rule, or a workflow that wants network: none.
  void checkReachesSomething(const YAML::Node& root, const Workflow& w) {
    if (w.sandbox.network != NetworkMode::kProxy) return;
    if (std::any_of(w.rules.begin(), w.rules.end(),
                    [](const Rule& r) { return r.action != Action::kDeny; })) {
      return;
    }
    YAML::Node at = root["egress"] ? root["egress"] : root["name"] ? root["name"] : root;
    warning(at, "workflow '" + w.name +
                    "' can reach nothing: it has no allow or ask rule, so every connection "
                    "is refused; add a rule, or set 'sandbox: {network: none}' if it needs "
                    "no network");
  }

  // A rule for port 443 only, tunnelled through: its requests are encrypted, so conditions
  // on them (and injection into them) cannot be enforced.
  void checkEnforceableThroughTls(const YAML::Node& n, const Rule& r) {
    for (const char* key : {"methods", "paths", "inject"}) {
      if (!n[key]) continue;
      error(n[key], std::string("'") + key + "' on rule '" + r.id +
                        "' cannot be enforced: its traffic (port 443, tls: passthrough) is "
                        "encrypted; add 'tls: inspect'");
    }
  }

  // Keys that do nothing for the rule's action.
  void checkNoEffect(const YAML::Node& n, const Rule& r) {
    if (r.action == Action::kDeny && n["inject"]) {
      error(n["inject"], "'inject' on deny rule '" + r.id + "' has no effect");
    }
    if (r.action == Action::kDeny && n["allow_private"]) {
      error(n["allow_private"], "'allow_private' on deny rule '" + r.id + "' has no effect");
    }
    if (r.action != Action::kAsk && n["ask"]) {
      error(n["ask"], "'ask' on " + std::string(actionName(r.action)) + " rule '" + r.id +
                          "' has no effect (only action: ask waits for an approver)");
    }
    if (r.action == Action::kDeny && n["allow_get_body"]) {
      error(n["allow_get_body"], "'allow_get_body' on deny rule '" + r.id + "' has no effect");
    }
  }

  void parseEgress(const YAML::Node& n, Workflow& w) {
    if (!checkMap(n, "egress", {"rules", "limits"})) return;
    if (auto rules = n["rules"]) {
      if (!rules.IsSequence()) {
        error(rules, "egress.rules must be a list of rules");
      } else {
        std::set<std::string> ids;
        for (const auto& r : rules) parseRule(r, w, ids);
        checkAwsSigv4Rules(w.rules, injectContext());
      }
    }
    if (auto l = n["limits"]) parseLimits(l, w.limits);
  }

  void parseRoot(const YAML::Node& root, Workflow& w) {
    if (!root || root.IsNull()) {
      diags_.push_back({file_, {1, 1}, "empty policy file"});
      return;
    }
    if (!checkMap(root, "the workflow",
                  {"apiVersion", "kind", "name", "description", "sandbox", "egress"})) {
      return;
    }
    if (auto v = root["apiVersion"]) {
      auto s = str(v, "apiVersion");
      if (s && *s != "sluice/v1") error(v, "apiVersion must be 'sluice/v1' (got '" + *s + "')");
    } else {
      error(root, "missing 'apiVersion: sluice/v1'");
    }
    if (auto v = root["kind"]) {
      auto s = str(v, "kind");
      if (s && *s != "Workflow") error(v, "kind must be 'Workflow' (got '" + *s + "')");
    } else {
      error(root, "missing 'kind: Workflow'");
    }
    if (auto v = root["name"]) {
      if (auto s = str(v, "name")) {
        if (!isWorkflowName(*s)) {
          error(v, "bad workflow name '" + *s +
                       "' (lower-case letters, digits and '-', starting with a letter or digit, "
                       "at most 63)");
        }
        w.name = *s;
      }
    } else {
      error(root, "missing 'name'");
    }
    if (auto v = root["description"]) {
      if (auto s = str(v, "description")) w.description = *s;
    }
    if (auto v = root["sandbox"]) parseSandbox(v, w.sandbox);
    if (auto v = root["egress"]) parseEgress(v, w);
    checkReachesSomething(root, w);
  }

 private:
  std::string file_;
  std::vector<Diagnostic> diags_;
  std::vector<Diagnostic> warnings_;
};

}  // namespace

std::expected<Workflow, LoadError> parseWorkflow(std::string_view yaml, std::string_view file) {
  Parser parser{std::string(file)};
  Workflow w;
  try {
    YAML::Node root = YAML::Load(std::string(yaml));
    parser.parseRoot(root, w);
  } catch (const YAML::Exception& e) {
    // yaml-cpp reports syntax errors by exception; keep its position and message.
    parser.errorAt(e.mark, e.msg);
  } catch (const std::exception& e) {
    parser.diagnostics().push_back({std::string(file), {}, e.what()});
  }
  if (parser.diagnostics().empty())
    for (auto& d : checkTokenEndpoints(w, std::string(file))) parser.diagnostics().push_back(d);
  if (!parser.diagnostics().empty()) {
    auto& diags = parser.diagnostics();
    std::stable_sort(diags.begin(), diags.end(), [](const Diagnostic& a, const Diagnostic& b) {
      return std::pair(a.pos.line, a.pos.column) < std::pair(b.pos.line, b.pos.column);
    });
    return std::unexpected(LoadError{diags});
  }
  w.warnings = std::move(parser.warnings());
  w.source_path = std::string(file);
  w.yaml_text = std::string(yaml);
  w.sha256 = base::sha256Hex(yaml);
  return w;
}

std::expected<Workflow, LoadError> loadWorkflowFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return std::unexpected(
        LoadError{{{path.string(), {}, "cannot read file: " + std::string(std::strerror(errno))}}});
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return parseWorkflow(ss.str(), path.string());
}

std::string PolicySet::unknownWorkflow(std::string_view name, std::string_view dir) const {
  std::string names;
  for (const auto& [n, w] : workflows) names += (names.empty() ? "" : ", ") + n;
  if (names.empty()) names = "none";
  return "--workflow " + std::string(name) + ": no such workflow in " + std::string(dir) +
         " (it has: " + names + ")";
}

const Workflow* PolicySet::find(std::string_view name) const {
  auto it = workflows.find(std::string(name));
  return it == workflows.end() ? nullptr : it->second.get();
}

std::expected<PolicySet, LoadError> loadPolicyDir(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return std::unexpected(LoadError{{{dir.string(), {}, "not a directory"}}});
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    auto ext = e.path().extension();
    if (e.is_regular_file() && (ext == ".yaml" || ext == ".yml")) files.push_back(e.path());
  }
  if (ec) return std::unexpected(LoadError{{{dir.string(), {}, "cannot list: " + ec.message()}}});
  std::sort(files.begin(), files.end());
  LoadError err;
  PolicySet set;
  std::map<std::string, std::string> origin;
  for (const auto& f : files) {
    auto w = loadWorkflowFile(f);
    if (!w) {
      err.diagnostics.insert(err.diagnostics.end(), w.error().diagnostics.begin(),
                             w.error().diagnostics.end());
      continue;
    }
    auto [it, inserted] = origin.emplace(w->name, f.string());
    if (!inserted) {
      // Point at the `name:` line of the second file.
      SourcePos pos{1, 1};
      try {
        YAML::Node root = YAML::Load(w->yaml_text);
        auto m = root["name"].Mark();
        pos = {m.line + 1, m.column + 1};
      } catch (const YAML::Exception&) {
      }
      err.diagnostics.push_back(
          {f.string(), pos, "workflow '" + w->name + "' is already defined in " + it->second});
      continue;
    }
    std::string name = w->name;
    set.workflows.emplace(name, std::make_shared<const Workflow>(std::move(*w)));
  }
  if (files.empty() && err.diagnostics.empty()) {
    err.diagnostics.push_back({dir.string(), {}, "no *.yaml workflow files"});
  }
  if (!err.diagnostics.empty()) return std::unexpected(std::move(err));
  return set;
}

std::expected<PolicySet, LoadError> loadPolicyPath(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return loadPolicyDir(path);
  auto w = loadWorkflowFile(path);
  if (!w) return std::unexpected(std::move(w.error()));
  PolicySet set;
  std::string name = w->name;
  set.workflows.emplace(name, std::make_shared<const Workflow>(std::move(*w)));
  return set;
}

bool isWorkflowName(std::string_view s) {
  auto ok = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (s.empty() || s.size() > 63 || !ok(s[0])) return false;
  return std::all_of(s.begin(), s.end(), [&](char c) { return ok(c) || c == '-'; });
}

}  // namespace sluice::policy
