// EventTee (event_tee.hpp).
#include "event_tee.hpp"

#include <nlohmann/json.hpp>

#include "sluice/audit/event_text.hpp"
#include "sluice/base/json.hpp"

namespace sluice::serve {
namespace {

/// "allow" | "deny" | "fail", as the audit row stores it.
std::string decisionText(audit::Decision d) { return std::string(audit::textOf(d)); }

/// The receipt's word for an attempt with this decision.
std::string_view outcomeOf(audit::Decision d) {
  switch (d) {
    case audit::Decision::kAllow:
      return "allowed";
    case audit::Decision::kDeny:
      return "denied";
    case audit::Decision::kFail:
      return "failed";
    case audit::Decision::kWouldDeny:
      return "would_deny";
  }
  return "denied";
}

}  // namespace

void EventTee::subscribe(const std::string& execution_id, std::function<void(std::string)> fn) {
  std::lock_guard lock(mu_);
  subscribers_[execution_id] = std::move(fn);
}

void EventTee::unsubscribe(const std::string& execution_id) {
  std::lock_guard lock(mu_);
  subscribers_.erase(execution_id);
}

bool EventTee::watched(const std::string& execution_id) {
  if (execution_id.empty()) return false;
  std::lock_guard lock(mu_);
  return subscribers_.count(execution_id) != 0;
}

void EventTee::publish(const std::string& execution_id, const std::string& line) {
  std::function<void(std::string)> fn;
  {
    std::lock_guard lock(mu_);
    auto it = subscribers_.find(execution_id);
    if (it == subscribers_.end()) return;
    fn = it->second;
  }
  fn(line);
}

void EventTee::recordPolicy(const std::string& sha256, const std::string& workflow,
                            const std::string& yaml_text) {
  store_->recordPolicy(sha256, workflow, yaml_text);
}

template <typename Event>
void EventTee::countShadow(const Event& e) {
  if (e.stamp.shadow_decision)
    metrics_.shadow(audit::shadowAgrees(e.decision, *e.stamp.shadow_decision));
}

void EventTee::recordConnection(audit::ConnectionEvent e) {
  countShadow(e);
  metrics_.decision(decisionText(e.decision), e.reason);
  if (audit::countsAsAttempt(e.kind, e.decision, e.tls)) metrics_.attempt(outcomeOf(e.decision));
  metrics_.proxyBytes(e.bytes_up, e.bytes_down);
  if (watched(e.execution_id)) {  // the JSON only for a live stream
    nlohmann::json j = {{"type", "network"}, {"decision", decisionText(e.decision)},
                        {"host", e.host},    {"port", e.port},
                        {"rule", nullptr},   {"reason", e.reason}};
    if (!e.rule_id.empty()) j["rule"] = e.rule_id;
    publish(e.execution_id, base::dumpJson(j));
  }
  store_->recordConnection(std::move(e));
}

void EventTee::recordRequest(audit::RequestEvent e) {
  countShadow(e);
  metrics_.decision(decisionText(e.decision), e.reason);
  metrics_.attempt(outcomeOf(e.decision));
  if (watched(e.execution_id)) {
    nlohmann::json j = {{"type", "network"},  {"decision", decisionText(e.decision)},
                        {"host", e.host},     {"port", e.port},
                        {"method", e.method}, {"path", e.path},
                        {"status", e.status}, {"rule", nullptr},
                        {"reason", e.reason}};
    if (!e.rule_id.empty()) j["rule"] = e.rule_id;
    publish(e.execution_id, base::dumpJson(j));
  }
  store_->recordRequest(std::move(e));
}

void EventTee::recordForward(audit::ForwardEvent e) { store_->recordForward(std::move(e)); }

void EventTee::recordDns(audit::DnsEvent e) {
  countShadow(e);
  metrics_.decision(decisionText(e.decision), e.reason);
  store_->recordDns(std::move(e));
}

void EventTee::recordApproval(audit::ApprovalEvent event) {
  store_->recordApproval(std::move(event));
}

void EventTee::approvalRaised(const proxy::Approval& a) {
  // A session's exec streams under its own id (the desk names it in execution_id).
  const std::string& stream = a.execution_id;
  if (!watched(stream)) return;
  // schemas/api.v1.yaml ApprovalEvent: {"type":"approval","approval":{...}}, as a receipt line.
  nlohmann::json j = {{"type", "approval"},
                      {"approval", nlohmann::json::parse(proxy::approvalJson(a))}};
  publish(stream, base::dumpJson(j));
}

}  // namespace sluice::serve
