// The proxy's audit events, on their way to the store, also feed the metrics and the live
// NDJSON streams of the executions they belong to (`{"type":"network",...}` lines), so the
// proxy needs no second reporting path.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "metrics.hpp"
#include "sluice/audit/event_sink.hpp"
#include "sluice/proxy/approvals.hpp"

namespace sluice::serve {

class EventTee final : public audit::EventSink {
 public:
  EventTee(std::shared_ptr<audit::EventSink> store, Metrics& metrics)
      : store_(std::move(store)), metrics_(metrics) {}

  /// Network decisions of `execution_id` go to `fn` (a JSON line) until unsubscribe().
  void subscribe(const std::string& execution_id, std::function<void(std::string)> fn);
  void unsubscribe(const std::string& execution_id);

  void recordPolicy(const std::string& sha256, const std::string& workflow,
                    const std::string& yaml_text) override;
  void recordConnection(audit::ConnectionEvent event) override;
  void recordRequest(audit::RequestEvent event) override;
  void recordForward(audit::ForwardEvent event) override;
  void recordDns(audit::DnsEvent event) override;
  void recordApproval(audit::ApprovalEvent event) override;
  /// A new pending approval: `{"type":"approval",...}` to the stream of its execution (a
  /// session's exec: the desk attributes it to the exec).
  void approvalRaised(const proxy::Approval& a);
  bool healthy() const override { return store_->healthy(); }

 private:
  /// True when a stream subscribed to `execution_id` (only then is an event rendered).
  bool watched(const std::string& execution_id);
  void publish(const std::string& execution_id, const std::string& line);
  /// Counts a row's shadow decision, if it has one, in /metrics.
  template <typename Event>
  void countShadow(const Event& e);

  std::shared_ptr<audit::EventSink> store_;
  Metrics& metrics_;
  std::mutex mu_;
  std::unordered_map<std::string, std::function<void(std::string)>> subscribers_;
};

}  // namespace sluice::serve
