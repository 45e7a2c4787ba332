// Small helpers on the typed workflow structs.
#include "sluice/policy/workflow.hpp"

#include <algorithm>

namespace sluice::policy {

std::string_view actionName(Action a) {
  switch (a) {
    case Action::kAllow:
      return "allow";
    case Action::kAsk:
      return "ask";
    case Action::kDeny:
      break;
  }
  return "deny";
}
std::string_view tlsModeName(TlsMode t) {
  return t == TlsMode::kInspect ? "inspect" : "passthrough";
}
std::string_view networkModeName(NetworkMode n) {
  return n == NetworkMode::kProxy ? "proxy" : "none";
}

bool Rule::allowsPort(std::uint16_t p) const {
  return std::any_of(ports.begin(), ports.end(), [p](const PortRange& r) { return r.contains(p); });
}

std::string Rule::portsText() const {
  std::string out = "[";
  for (std::size_t i = 0; i < ports.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(ports[i].lo);
    if (ports[i].hi != ports[i].lo) out += "-" + std::to_string(ports[i].hi);
  }
  return out + "]";
}

const Rule* Workflow::findRule(std::string_view id) const {
  for (const auto& r : rules) {
    if (r.id == id) return &r;
  }
  return nullptr;
}

std::vector<std::string> Workflow::secretNames() const {
  std::vector<std::string> out;
  for (const auto& r : rules) {
    out.insert(out.end(), r.inject.secret_names.begin(), r.inject.secret_names.end());
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace sluice::policy
