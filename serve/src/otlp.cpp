// OTLP/HTTP JSON export (sluice/serve/otlp.hpp). The JSON follows the OTLP spec's protobuf JSON
// mapping: camelCase field names, 64-bit integers as decimal strings, enums as numbers.
#include "sluice/serve/otlp.hpp"

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "event_tee.hpp"
#include "metrics.hpp"
#include "otlp_http.hpp"
#include "sluice/audit/event_text.hpp"
#include "sluice/base/json.hpp"
#include "sluice/base/log.hpp"
#include "sluice/base/loop.hpp"

namespace sluice::serve {
namespace {

using json = nlohmann::json;
using Clock = base::BackgroundLoop::Clock;

constexpr std::size_t kBatch = 512;
// Log records leave at least this often (sooner when a batch fills).
constexpr std::chrono::milliseconds kLogPeriod{1000};
// Tries of one batch (the first and the retries) before it is dropped.
constexpr int kMaxAttempts = 6;
// OTLP SeverityNumber values.
constexpr int kSeverityInfo = 9;
constexpr int kSeverityWarn = 13;
constexpr int kCumulative = 2;  // AggregationTemporality CUMULATIVE

std::string nanos(std::int64_t ms) { return std::to_string(ms) + "000000"; }

std::int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

json stringAttr(const std::string& key, const std::string& value) {
  return {{"key", key}, {"value", {{"stringValue", value}}}};
}

json intAttr(const std::string& key, std::int64_t value) {
  return {{"key", key}, {"value", {{"intValue", std::to_string(value)}}}};
}

// One attribute of a queued log record, its key without the "sluice." prefix.
struct Attr {
  const char* key;
  std::string text;  // a string attribute (is_text)
  std::int64_t number = 0;
  bool is_text = true;
};

// A log record's attributes, built field by field; empty strings are left out.
class Attrs {
 public:
  Attrs() { list_.reserve(16); }
  Attrs& str(const char* key, const std::string& value) {
    if (!value.empty()) list_.push_back({key, value});
    return *this;
  }
  Attrs& num(const char* key, std::int64_t value) {
    list_.push_back({key, {}, value, false});
    return *this;
  }
  std::vector<Attr> take() { return std::move(list_); }

 private:
  std::vector<Attr> list_;
};

// A decision event as queued: plain fields. The proxy's thread only copies them; the export
// thread builds the JSON (toJson), so no JSON tree is allocated on the data plane.
struct Record {
  std::int64_t ts_ms = 0;
  std::int64_t observed_ms = 0;  // when it was queued
  bool allowed = false;
  std::string body;
  std::vector<Attr> attrs;
};

Record logRecord(std::int64_t ts_ms, audit::Decision d, std::string body, Attrs attrs) {
  return {ts_ms, nowMs(), d == audit::Decision::kAllow, std::move(body), attrs.take()};
}

json toJson(const Record& r) {
  json attrs = json::array();
  for (const Attr& a : r.attrs)
    attrs.push_back(a.is_text ? stringAttr(std::string("sluice.") + a.key, a.text)
                              : intAttr(std::string("sluice.") + a.key, a.number));
  return {{"timeUnixNano", nanos(r.ts_ms)},
          {"observedTimeUnixNano", nanos(r.observed_ms)},
          {"severityNumber", r.allowed ? kSeverityInfo : kSeverityWarn},
          {"severityText", r.allowed ? "INFO" : "WARN"},
          {"body", {{"stringValue", r.body}}},
          {"attributes", std::move(attrs)}};
}

std::string decisionText(audit::Decision d) { return std::string(audit::textOf(d)); }

json resource(const OtlpOptions& o) {
  return {{"attributes", json::array({stringAttr("service.name", o.service_name)})}};
}

json scope() { return {{"name", "sluice"}}; }

json logsBody(const OtlpOptions& o, json records) {
  json scope_logs = {{"scope", scope()}, {"logRecords", std::move(records)}};
  json rl = {{"resource", resource(o)}, {"scopeLogs", json::array({std::move(scope_logs)})}};
  return {{"resourceLogs", json::array({std::move(rl)})}};
}

// One Sum metric per counter name, its points in the order given.
json metricsBody(const OtlpOptions& o, const std::vector<CounterPoint>& points,
                 std::int64_t start_ms) {
  const std::string start = nanos(start_ms), now = nanos(nowMs());
  json metrics = json::array();
  for (const CounterPoint& p : points) {
    if (metrics.empty() || metrics.back()["name"] != p.name)
      metrics.push_back({{"name", p.name},
                         {"description", p.description},
                         {"sum",
                          {{"aggregationTemporality", kCumulative},
                           {"isMonotonic", true},
                           {"dataPoints", json::array()}}}});
    json attrs = json::array();
    for (const auto& [k, v] : p.attributes) attrs.push_back(stringAttr(k, v));
    metrics.back()["sum"]["dataPoints"].push_back({{"attributes", std::move(attrs)},
                                                   {"startTimeUnixNano", start},
                                                   {"timeUnixNano", now},
                                                   {"asInt", std::to_string(p.value)}});
  }
  json scope_metrics = {{"scope", scope()}, {"metrics", std::move(metrics)}};
  json rm = {{"resource", resource(o)}, {"scopeMetrics", json::array({std::move(scope_metrics)})}};
  return {{"resourceMetrics", json::array({std::move(rm)})}};
}

/// A batch of log records on its way: its body, and when it may be tried again.
struct Batch {
  std::string body;
  std::size_t records = 0;
  int attempts = 0;
  Clock::time_point retry_at{};
};

class Exporter final : public OtlpExporter, public std::enable_shared_from_this<Exporter> {
 public:
  Exporter(OtlpOptions o, std::unique_ptr<detail::OtlpClient> client, Counters c)
      : options_(std::move(o)),
        client_(std::move(client)),
        counters_(std::move(c)),
        max_batches_(std::max<std::size_t>(1, options_.queue_limit / kBatch)) {}

  void begin() {
    next_metrics_ = Clock::now() + options_.interval;
    loop_.startScheduled([this] { return tick(); });
  }

  /// Queues a record; never waits. A full queue drops its oldest batch (counted): the newest
  /// events say most about now.
  void enqueue(Record record) {
    bool full = false;
    {
      std::lock_guard lock(mu_);
      if (queue_.empty() || queue_.back().size() >= kBatch) {
        if (queue_.size() >= max_batches_) {
          dropped_.fetch_add(queue_.front().size(), std::memory_order_relaxed);
          queue_.pop_front();
        }
        queue_.emplace_back();
      }
      queue_.back().push_back(std::move(record));
      full = queue_.back().size() == kBatch;
    }
    if (full) loop_.wake();
  }

  std::shared_ptr<audit::EventSink> wrap(std::shared_ptr<audit::EventSink> next) override;
  std::uint64_t dropped() const override { return dropped_.load(); }
  std::uint64_t exported() const override { return exported_.load(); }

  void stop() override {
    if (stopped_.exchange(true)) return;
    loop_.stop();
    sendLogs(true);
    sendMetrics();
    if (dropped_.load() > 0)
      base::logger(base::LoggerId::kServe)
          .warn("otlp export to {}: {} records exported, {} dropped", client_->where(),
                exported_.load(), dropped_.load());
  }

  ~Exporter() override { loop_.stop(); }

 private:
  // The loop's tick: logs (and a batch's retry) when due, metrics every interval; returns when
  // it is next due.
  Clock::time_point tick() {
    sendLogs(false);
    const auto now = Clock::now();
    if (now >= next_metrics_) {
      next_metrics_ = std::max(next_metrics_ + options_.interval, now);
      sendMetrics();
    }
    auto due = std::min(next_metrics_, Clock::now() + kLogPeriod);
    if (inflight_) due = std::min(due, std::max(inflight_->retry_at, Clock::now()));
    return due;
  }

  /// The oldest queued batch, as a request body; nullopt when the queue is empty.
  std::optional<Batch> takeBatch() {
    std::vector<Record> records;
    {
      std::lock_guard lock(mu_);
      if (queue_.empty()) return std::nullopt;
      records = std::move(queue_.front());
      queue_.pop_front();
    }
    json list = json::array();
    for (const Record& r : records) list.push_back(toJson(r));
    Batch b;
    b.records = records.size();
    b.body = base::dumpJson(logsBody(options_, std::move(list)));
    return b;
  }

  // Every queued batch in order, each until it is delivered, refused or out of tries; stops at
  // a batch waiting for its retry. `last` (at stop): one try each, no waiting.
  void sendLogs(bool last) {
    for (;;) {
      if (!inflight_) inflight_ = takeBatch();
      if (!inflight_) return;
      if (!last && Clock::now() < inflight_->retry_at) return;
      if (!attempt(*inflight_, last)) return;
      inflight_.reset();
    }
  }

  /// One try of `b`; true when it is done with (delivered, or dropped and counted).
  bool attempt(Batch& b, bool last) {
    auto reply = client_->post("/v1/logs", b.body);
    if (reply && reply->status / 100 == 2) {
      exported_.fetch_add(b.records, std::memory_order_relaxed);
      warned_.store(false);
      return true;
    }
    warn("/v1/logs", reply);
    ++b.attempts;
    // 4xx other than 429: the collector will not take this batch however often it is sent.
    if (last || !detail::otlpRetryable(reply) || b.attempts >= kMaxAttempts) {
      dropped_.fetch_add(b.records, std::memory_order_relaxed);
      return true;
    }
    b.retry_at = Clock::now() + detail::otlpBackoff(b.attempts, reply);
    return false;
  }

  // One try: the counters are cumulative, so the next export carries whatever this one lost.
  void sendMetrics() {
    std::vector<CounterPoint> points = counters_ ? counters_() : std::vector<CounterPoint>{};
    for (auto& p : otlpCounterPoints(*this)) points.push_back(std::move(p));
    auto reply =
        client_->post("/v1/metrics", base::dumpJson(metricsBody(options_, points, start_ms_)));
    if (!reply || reply->status / 100 != 2) warn("/v1/metrics", reply);
  }

  // Warned once per outage, not per batch: a dead collector must not flood the log.
  void warn(const std::string& path, const base::Result<detail::OtlpReply>& reply) {
    if (warned_.exchange(true)) return;
    base::logger(base::LoggerId::kServe)
        .warn("otlp export to {}{} failed: {}", client_->where(), path,
              reply ? "HTTP " + std::to_string(reply->status) : reply.error().text());
  }

  OtlpOptions options_;
  std::unique_ptr<detail::OtlpClient> client_;
  Counters counters_;
  const std::size_t max_batches_;
  const std::int64_t start_ms_ = nowMs();
  base::BackgroundLoop loop_{"otlp-export"};
  Clock::time_point next_metrics_{};
  std::optional<Batch> inflight_;  // the loop's: the batch being sent or waiting for a retry
  std::mutex mu_;
  std::deque<std::vector<Record>> queue_;  // batches of up to kBatch records, oldest first
  std::atomic<std::uint64_t> dropped_{0}, exported_{0};
  std::atomic<bool> warned_{false}, stopped_{false};
};

// Queues each decision event as a log record, then passes it on.
class OtlpSink final : public audit::EventSink {
 public:
  OtlpSink(std::shared_ptr<Exporter> ex, std::shared_ptr<audit::EventSink> next)
      : ex_(std::move(ex)), next_(std::move(next)) {}

  void recordPolicy(const std::string& sha256, const std::string& workflow,
                    const std::string& yaml_text) override {
    if (next_) next_->recordPolicy(sha256, workflow, yaml_text);
  }

  void recordConnection(audit::ConnectionEvent e) override {
    Attrs a;
    a.str("event", "connection").str("decision", decisionText(e.decision)).str("reason", e.reason);
    a.str("rule", e.rule_id).str("host", e.host).num("port", e.port);
    a.str("kind", std::string(audit::textOf(e.kind))).str("workflow", e.workflow);
    a.str("execution_id", e.execution_id).str("connection_id", e.id);
    a.num("bytes_up", static_cast<std::int64_t>(e.bytes_up));
    a.num("bytes_down", static_cast<std::int64_t>(e.bytes_down));
    ex_->enqueue(logRecord(
        e.ts_ms, e.decision,
        "connection " + decisionText(e.decision) + " " + e.host + ":" + std::to_string(e.port),
        std::move(a)));
    if (next_) next_->recordConnection(std::move(e));
  }

  void recordRequest(audit::RequestEvent e) override {
    Attrs a;
    a.str("event", "request").str("decision", decisionText(e.decision)).str("reason", e.reason);
    a.str("rule", e.rule_id).str("host", e.host).num("port", e.port).str("method", e.method);
    a.str("path", e.path).num("status", e.status).str("workflow", e.workflow);
    a.str("execution_id", e.execution_id).str("connection_id", e.connection_id);
    ex_->enqueue(
        logRecord(e.ts_ms, e.decision,
                  "request " + decisionText(e.decision) + " " + e.method + " " + e.host + e.path,
                  std::move(a)));
    if (next_) next_->recordRequest(std::move(e));
  }

  void recordForward(audit::ForwardEvent e) override {
    if (next_) next_->recordForward(std::move(e));
  }

  void recordDns(audit::DnsEvent e) override {
    Attrs a;
    a.str("event", "dns").str("decision", decisionText(e.decision)).str("reason", e.reason);
    a.str("rule", e.rule_id).str("host", e.name).str("qtype", e.qtype).str("answer", e.answer);
    a.str("workflow", e.workflow).str("execution_id", e.execution_id);
    ex_->enqueue(logRecord(e.ts_ms, e.decision, "dns " + decisionText(e.decision) + " " + e.name,
                           std::move(a)));
    if (next_) next_->recordDns(std::move(e));
  }

  void recordApproval(audit::ApprovalEvent e) override {
    Attrs a;
    a.str("event", "approval").str("decision", decisionText(e.decision)).str("reason", e.reason);
    a.str("rule", e.rule_id).str("host", e.host).num("port", e.port).str("method", e.method);
    a.str("path", e.path).str("workflow", e.workflow).str("execution_id", e.execution_id);
    a.str("session_id", e.session_id).str("approval_id", e.id).str("decided_by", e.decided_by);
    ex_->enqueue(logRecord(e.decided_at_ms, e.decision,
                           "approval " + decisionText(e.decision) + " " + e.host, std::move(a)));
    if (next_) next_->recordApproval(std::move(e));
  }

  bool healthy() const override { return !next_ || next_->healthy(); }

 private:
  std::shared_ptr<Exporter> ex_;
  std::shared_ptr<audit::EventSink> next_;
};

std::shared_ptr<audit::EventSink> Exporter::wrap(std::shared_ptr<audit::EventSink> next) {
  return std::make_shared<OtlpSink>(shared_from_this(), std::move(next));
}

// A store for EventTee when the proxy has none: takes nothing, always healthy.
class NullSink final : public audit::EventSink {
 public:
  void recordPolicy(const std::string&, const std::string&, const std::string&) override {}
  void recordConnection(audit::ConnectionEvent) override {}
  void recordRequest(audit::RequestEvent) override {}
  void recordForward(audit::ForwardEvent) override {}
  void recordDns(audit::DnsEvent) override {}
  bool healthy() const override { return true; }
};

class ProxyTelemetry final : public OtlpProxyTelemetry {
 public:
  base::Result<void> begin(OtlpOptions options, std::shared_ptr<audit::EventSink> store) {
    auto ex = OtlpExporter::start(std::move(options), [this] { return metrics_.counters(); });
    if (!ex) return std::unexpected(std::move(ex.error()));
    exporter_ = std::move(*ex);
    if (!store) store = std::make_shared<NullSink>();
    // The tee counts as serve's /metrics does; the export sink sits between it and the store.
    sink_ = std::make_shared<EventTee>(exporter_->wrap(std::move(store)), metrics_);
    return {};
  }
  std::shared_ptr<audit::EventSink> sink() override { return sink_; }
  void stop() override { exporter_->stop(); }
  ~ProxyTelemetry() override {
    if (exporter_) exporter_->stop();
  }

 private:
  Metrics metrics_;
  std::shared_ptr<OtlpExporter> exporter_;
  std::shared_ptr<audit::EventSink> sink_;
};

}  // namespace

std::vector<CounterPoint> otlpCounterPoints(const OtlpExporter& ex) {
  return {{"sluice_otlp_exported_total",
           "Decision events the OpenTelemetry collector took.",
           {},
           ex.exported()},
          {"sluice_otlp_dropped_total",
           "Decision events not exported: the queue overflowed (oldest batch first), or the "
           "collector refused them or stayed unreachable through every retry.",
           {},
           ex.dropped()}};
}

base::Result<std::shared_ptr<OtlpExporter>> OtlpExporter::start(OtlpOptions options,
                                                                Counters counters) {
  auto target = detail::parseOtlpEndpoint(options.endpoint);
  if (!target) return std::unexpected(std::move(target.error()));
  if (options.interval.count() < 1)
    return base::fail(base::Code::kInvalidArgument, "--otlp-interval must be positive");
  auto client = detail::OtlpClient::make(std::move(*target), options.ca_file);
  if (!client) return std::unexpected(std::move(client.error()));
  auto ex = std::make_shared<Exporter>(std::move(options), std::move(*client), std::move(counters));
  ex->begin();
  return ex;
}

base::Result<std::unique_ptr<OtlpProxyTelemetry>> OtlpProxyTelemetry::start(
    OtlpOptions options, std::shared_ptr<audit::EventSink> store) {
  auto t = std::make_unique<ProxyTelemetry>();
  if (auto r = t->begin(std::move(options), std::move(store)); !r)
    return std::unexpected(std::move(r.error()));
  return t;
}

}  // namespace sluice::serve
