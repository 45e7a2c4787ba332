// OTLP/HTTP JSON export (sluice/serve/otlp.hpp). The JSON follows the OTLP spec's protobuf JSON
// mapping: camelCase field names, 64-bit integers as decimal strings, enums as numbers.
#include "sluice/serve/otlp.hpp"

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>

#include "event_tee.hpp"
#include "metrics.hpp"
#include "sluice/audit/event_text.hpp"
#include "sluice/base/json.hpp"
#include "sluice/base/log.hpp"
#include "sluice/base/loop.hpp"

namespace sluice::serve {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using json = nlohmann::json;

// How long one POST may take; a slower collector loses that batch (it is counted as dropped).
constexpr std::chrono::seconds kPostTimeout{2};
constexpr std::size_t kBatch = 512;
// Log records leave at least this often (sooner when a batch fills).
constexpr std::chrono::milliseconds kLogPeriod{1000};
// OTLP SeverityNumber values.
constexpr int kSeverityInfo = 9;
constexpr int kSeverityWarn = 13;
constexpr int kCumulative = 2;  // AggregationTemporality CUMULATIVE

struct Target {
  std::string host;
  std::string port;
  std::string prefix;  // path before /v1/logs, without a trailing '/'
};

base::Result<Target> parseEndpoint(const std::string& url) {
  const std::string scheme = "http://";
  if (url.rfind("https://", 0) == 0)
    return base::fail(base::Code::kInvalidArgument,
                      "--otlp-endpoint: https is not supported yet; give http://HOST:PORT");
  if (url.rfind(scheme, 0) != 0)
    return base::fail(base::Code::kInvalidArgument,
                      "--otlp-endpoint '" + url + "' is not http://HOST:PORT[/PATH]");
  std::string rest = url.substr(scheme.size());
  Target t;
  auto slash = rest.find('/');
  if (slash != std::string::npos) {
    t.prefix = rest.substr(slash);
    rest.resize(slash);
  }
  while (!t.prefix.empty() && t.prefix.back() == '/') t.prefix.pop_back();
  auto colon = rest.rfind(':');
  bool v6 = !rest.empty() && rest.back() == ']';
  t.host = (colon == std::string::npos || v6) ? rest : rest.substr(0, colon);
  t.port = (colon == std::string::npos || v6) ? "80" : rest.substr(colon + 1);
  if (t.host.size() >= 2 && t.host.front() == '[') t.host = t.host.substr(1, t.host.size() - 2);
  if (t.host.empty() || t.port.empty() ||
      t.port.find_first_not_of("0123456789") != std::string::npos)
    return base::fail(base::Code::kInvalidArgument,
                      "--otlp-endpoint '" + url + "' is not http://HOST:PORT[/PATH]");
  return t;
}

// One POST of a JSON body; the collector's status, or why there is none. Asynchronous on its
// own io_context because Beast's deadline (expires_after) applies to asynchronous operations
// only: a collector that accepts and never answers costs kPostTimeout, not forever.
base::Result<int> post(const Target& t, const std::string& path, std::string body) {
  boost::asio::io_context io;
  beast::error_code ec;
  boost::asio::ip::tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(t.host, t.port, ec);
  if (ec) return base::fail(base::Code::kUnavailable, ec.message(), t.host);
  http::request<http::string_body> req{http::verb::post, t.prefix + path, 11};
  req.set(http::field::host, t.host + ":" + t.port);
  req.set(http::field::content_type, "application/json");
  req.body() = std::move(body);
  req.prepare_payload();
  beast::tcp_stream stream(io);
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  stream.expires_after(kPostTimeout);
  stream.async_connect(endpoints, [&](beast::error_code e, const auto&) {
    if (e) return void(ec = e);
    http::async_write(stream, req, [&](beast::error_code e2, std::size_t) {
      if (e2) return void(ec = e2);
      http::async_read(stream, buf, res, [&](beast::error_code e3, std::size_t) { ec = e3; });
    });
  });
  io.run();
  if (ec) return base::fail(base::Code::kUnavailable, ec.message(), t.host + ":" + t.port);
  stream.socket().shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
  return static_cast<int>(res.result_int());
}

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

// A log record's attributes, built field by field; empty strings are left out.
class Attrs {
 public:
  Attrs& str(const std::string& key, const std::string& value) {
    if (!value.empty()) list_.push_back(stringAttr("sluice." + key, value));
    return *this;
  }
  Attrs& num(const std::string& key, std::int64_t value) {
    list_.push_back(intAttr("sluice." + key, value));
    return *this;
  }
  json take() { return std::move(list_); }

 private:
  json list_ = json::array();
};

json logRecord(std::int64_t ts_ms, audit::Decision d, const std::string& body, Attrs attrs) {
  const bool allowed = d == audit::Decision::kAllow;
  return {{"timeUnixNano", nanos(ts_ms)},
          {"observedTimeUnixNano", nanos(nowMs())},
          {"severityNumber", allowed ? kSeverityInfo : kSeverityWarn},
          {"severityText", allowed ? "INFO" : "WARN"},
          {"body", {{"stringValue", body}}},
          {"attributes", attrs.take()}};
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

class Exporter final : public OtlpExporter, public std::enable_shared_from_this<Exporter> {
 public:
  Exporter(OtlpOptions o, Target t, Counters c)
      : options_(std::move(o)), target_(std::move(t)), counters_(std::move(c)) {}

  void begin() {
    next_metrics_ = base::BackgroundLoop::Clock::now() + options_.interval;
    loop_.start([this] { tick(); }, kLogPeriod);
  }

  /// Queues a record unless the queue is full (then counts it dropped); never waits.
  void enqueue(json record) {
    std::size_t depth = 0;
    {
      std::lock_guard lock(mu_);
      if (queue_.size() >= options_.queue_limit) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      queue_.push_back(std::move(record));
      depth = queue_.size();
    }
    if (depth == kBatch) loop_.wake();
  }

  std::shared_ptr<audit::EventSink> wrap(std::shared_ptr<audit::EventSink> next) override;
  std::uint64_t dropped() const override { return dropped_.load(); }

  void stop() override {
    if (stopped_.exchange(true)) return;
    loop_.stop();
    sendLogs();
    sendMetrics();
  }

  ~Exporter() override { loop_.stop(); }

 private:
  void tick() {
    sendLogs();
    if (base::BackgroundLoop::Clock::now() < next_metrics_) return;
    next_metrics_ += options_.interval;
    sendMetrics();
  }

  // Every queued record, in batches; a batch the collector did not take is dropped.
  void sendLogs() {
    for (;;) {
      json batch = json::array();
      {
        std::lock_guard lock(mu_);
        while (!queue_.empty() && batch.size() < kBatch) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      if (batch.empty()) return;
      const std::size_t n = batch.size();
      if (!delivered("/v1/logs", logsBody(options_, std::move(batch))))
        dropped_.fetch_add(n, std::memory_order_relaxed);
    }
  }

  void sendMetrics() {
    std::vector<CounterPoint> points = counters_ ? counters_() : std::vector<CounterPoint>{};
    points.push_back({"sluice_otlp_dropped_total",
                      "Decision events not exported: the queue was full or the collector "
                      "did not take them.",
                      {},
                      dropped_.load()});
    delivered("/v1/metrics", metricsBody(options_, points, start_ms_));
  }

  bool delivered(const std::string& path, const json& body) {
    auto status = post(target_, path, base::dumpJson(body));
    if (status && *status / 100 == 2) return true;
    // Warned once per outage, not per batch: a dead collector must not flood the log.
    if (!warned_.exchange(true))
      base::logger(base::LoggerId::kServe)
          .warn("otlp export to {}:{}{} failed: {}", target_.host, target_.port, path,
                status ? "HTTP " + std::to_string(*status) : status.error().text());
    return false;
  }

  OtlpOptions options_;
  Target target_;
  Counters counters_;
  const std::int64_t start_ms_ = nowMs();
  base::BackgroundLoop loop_{"otlp-export"};
  base::BackgroundLoop::Clock::time_point next_metrics_{};
  std::mutex mu_;
  std::deque<json> queue_;
  std::atomic<std::uint64_t> dropped_{0};
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

base::Result<std::shared_ptr<OtlpExporter>> OtlpExporter::start(OtlpOptions options,
                                                                Counters counters) {
  auto target = parseEndpoint(options.endpoint);
  if (!target) return std::unexpected(std::move(target.error()));
  if (options.interval.count() < 1)
    return base::fail(base::Code::kInvalidArgument, "--otlp-interval must be positive");
  auto ex = std::make_shared<Exporter>(std::move(options), std::move(*target), std::move(counters));
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
