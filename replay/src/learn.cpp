// `policy learn` (learn.hpp): the executions' connections and requests grouped by host and
// port, one rule per group and set of methods, written as YAML.
#include "sluice/replay/learn.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include "sluice/policy/ip_address.hpp"

namespace sluice::replay {

namespace {

// What the executions did at one host and port.
struct Group {
  std::string host;
  std::uint16_t port = 0;
  bool ip_literal = false;
  bool tunnelled = false;  // a tunnel whose requests were not seen (TLS passed through)
  bool inspected = false;  // requests seen inside inspected TLS
  std::uint64_t tunnels = 0;
  std::set<std::string> addresses;  // the vetted addresses dialled
  // path shape -> method -> (count, examples)
  struct Seen {
    std::uint64_t count = 0;
    std::vector<std::string> examples;
  };
  std::map<std::string, std::map<std::string, Seen>> shapes;
};

struct ConnSeen {
  std::string key;  // "host:port" of its group
  std::uint16_t port = 0;
  bool inspect = false;
  bool tunnel = false;  // an allowed tunnel (CONNECT or redirected) not inspected
  bool carried_requests = false;
};

bool wentThrough(const std::string& decision) {
  return decision == "allow" || decision == "would_deny";
}

std::string yamlQuoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// [A-Za-z0-9][A-Za-z0-9_.-]*, at most 63 characters, unique in the workflow.
std::string ruleId(const Group& g, std::size_t n, std::set<std::string>& used) {
  std::string base;
  for (char c : g.host)
    base += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '-';
  if (base.empty() || !std::isalnum(static_cast<unsigned char>(base[0]))) base = "h" + base;
  base = base.substr(0, 48) + "-" + std::to_string(g.port);
  std::string id = n ? base + "-" + std::to_string(n + 1) : base;
  for (int k = 2; used.contains(id); ++k) id = base + "-" + std::to_string(k);
  used.insert(id);
  return id;
}

class Learner {
 public:
  explicit Learner(History& h) : history_(h) {}
  base::Result<void> read(const std::vector<std::string>& executions);
  std::string yaml(const std::string& name, const std::vector<std::string>& executions) const;

 private:
  void connection(const ConnectionRow& r);
  void request(const RequestRow& r);
  void writeRules(std::ostream& out, const Group& g, std::set<std::string>& used) const;
  Group& group(const std::string& host, std::uint16_t port);

  History& history_;
  std::map<std::string, Group> groups_;  // "host:port", in order
  std::unordered_map<std::string, ConnSeen> conns_;
};

Group& Learner::group(const std::string& host, std::uint16_t port) {
  auto [it, fresh] = groups_.try_emplace(host + ":" + std::to_string(port));
  Group& g = it->second;
  if (fresh) {
    g.host = host;
    g.port = port;
    g.ip_literal = policy::parseIpLiteral(host).has_value();
  }
  return g;
}

base::Result<void> Learner::read(const std::vector<std::string>& executions) {
  if (auto known = history_.requireExecutions(executions); !known) return known;
  Scope scope{executions, std::nullopt, std::nullopt};
  auto c = history_.eachConnection(scope, true, [&](const ConnectionRow& r) { connection(r); });
  if (!c) return c;
  auto q = history_.eachRequest(scope, [&](const RequestRow& r) { request(r); });
  if (!q) return q;
  // A tunnel that carried plain HTTP was seen request by request; one that carried none passed
  // its bytes (TLS) through unseen.
  for (const auto& [id, c] : conns_)
    if (c.tunnel && !c.carried_requests) ++groups_.at(c.key).tunnels;
  return {};
}

void Learner::connection(const ConnectionRow& r) {
  if (r.kind != "connect" && r.kind != "transparent" && r.kind != "http") return;
  const bool through = wentThrough(r.decision) && !r.host.empty();
  conns_[r.id] = ConnSeen{r.host + ":" + std::to_string(r.port), r.port, r.tls == "inspect",
                          through && r.kind != "http" && r.tls != "inspect"};
  if (!through) return;
  Group& g = group(r.host, r.port);
  if (!r.resolved_ip.empty()) g.addresses.insert(r.resolved_ip);
}

void Learner::request(const RequestRow& r) {
  auto c = conns_.find(r.connection_id);
  if (c == conns_.end()) return;
  c->second.carried_requests = true;
  if (!wentThrough(r.decision) || r.method.empty()) return;
  Group& g = group(r.host, c->second.port);
  if (c->second.inspect) g.inspected = true;
  auto& seen = g.shapes[pathShape(r.path)][r.method];
  ++seen.count;
  if (seen.examples.size() < 3 &&
      std::find(seen.examples.begin(), seen.examples.end(), r.path) == seen.examples.end())
    seen.examples.push_back(r.path);
}

std::string cidrOf(const policy::IpAddress& ip) { return ip.str() + (ip.isV4() ? "/32" : "/128"); }

// The rule's destination keys: hosts (or, for an IP literal, cidrs alone), ports, and when an
// address dialled was not global, those addresses as cidrs with allow_private.
void writeDestination(std::ostream& out, const Group& g) {
  if (!g.ip_literal) out << "        hosts: [" << yamlQuoted(g.host) << "]\n";
  out << "        ports: [" << g.port << "]\n";
  std::vector<std::string> cidrs;
  bool non_global = false;
  std::set<std::string> addresses = g.addresses;
  if (g.ip_literal) addresses.insert(g.host);
  for (const auto& a : addresses) {
    auto ip = policy::parseIpLiteral(a);
    if (!ip) continue;
    cidrs.push_back(cidrOf(*ip));
    non_global |= policy::classifyAddress(*ip) != policy::AddressClass::kGlobal;
  }
  if (!g.ip_literal && !non_global) return;  // a name at global addresses needs no cidrs
  out << "        cidrs: [";
  for (std::size_t i = 0; i < cidrs.size(); ++i) out << (i ? ", " : "") << yamlQuoted(cidrs[i]);
  out << "]\n";
  if (non_global) out << "        allow_private: true\n";
}

void Learner::writeRules(std::ostream& out, const Group& g, std::set<std::string>& used) const {
  std::uint64_t requests = 0;
  for (const auto& [shape, methods] : g.shapes)
    for (const auto& [m, seen] : methods) requests += seen.count;
  if (g.tunnels == 0 && g.shapes.empty())
    return;  // an inspected tunnel all of whose requests were refused
  if (g.tunnels > 0) {
    // TLS passed through: nothing inside was seen, so nothing narrower than the port is known.
    out << "      # covers " << g.tunnels << " tunnel(s) whose requests were not seen"
        << (requests ? " and " + std::to_string(requests) + " request(s)" : std::string()) << "\n"
        << "      - id: " << ruleId(g, 0, used) << "\n        action: allow\n";
    writeDestination(out, g);
    return;
  }
  // One rule per set of methods, listing the path shapes requested with exactly those methods.
  std::map<std::set<std::string>, std::vector<std::string>> by_methods;
  for (const auto& [shape, methods] : g.shapes) {
    std::set<std::string> names;
    for (const auto& [m, seen] : methods) names.insert(m);
    by_methods[names].push_back(shape);
  }
  std::size_t n = 0;
  for (const auto& [methods, shapes] : by_methods) {
    std::uint64_t count = 0;
    std::vector<std::string> examples;
    for (const auto& s : shapes)
      for (const auto& [m, seen] : g.shapes.at(s)) {
        count += seen.count;
        for (const auto& e : seen.examples)
          if (examples.size() < 3) examples.push_back(m + " " + e);
      }
    out << "      # covers " << count << " request(s), e.g.";
    for (std::size_t i = 0; i < examples.size(); ++i) out << (i ? ", " : " ") << examples[i];
    out << "\n      - id: " << ruleId(g, n++, used) << "\n        action: allow\n";
    writeDestination(out, g);
    // Port 443 alone: the loader refuses request conditions a passthrough rule cannot enforce
    // there, and inspect still grants plain HTTP.
    if (g.inspected || g.port == 443) out << "        tls: inspect\n";
    out << "        methods: [";
    std::size_t i = 0;
    for (const auto& m : methods) out << (i++ ? ", " : "") << m;
    out << "]\n        paths: [";
    for (std::size_t k = 0; k < shapes.size(); ++k) out << (k ? ", " : "") << yamlQuoted(shapes[k]);
    out << "]\n";
  }
}

std::string Learner::yaml(const std::string& name,
                          const std::vector<std::string>& executions) const {
  std::ostringstream out;
  std::string from;
  for (const auto& e : executions) from += (from.empty() ? "" : ", ") + e;
  out << "# Learned by `sluice policy learn` from execution(s) " << from
      << ". Review every rule before use.\n"
      << "apiVersion: sluice/v1\nkind: Workflow\nname: " << name << "\n"
      << "description: " << yamlQuoted("learned from " + from) << "\n";
  std::ostringstream rules;
  std::set<std::string> used;
  for (const auto& [key, g] : groups_) writeRules(rules, g, used);
  if (used.empty()) {
    out << "# No connection went through: the workflow needs no network.\n"
        << "sandbox:\n  network: none\n";
    return out.str();
  }
  out << "egress:\n  rules:\n" << rules.str();
  return out.str();
}

}  // namespace

base::Result<std::string> learn(History& history, const std::vector<std::string>& executions,
                                const std::string& name) {
  Learner l(history);
  if (auto r = l.read(executions); !r) return std::unexpected(r.error());
  return l.yaml(name, executions);
}

}  // namespace sluice::replay
