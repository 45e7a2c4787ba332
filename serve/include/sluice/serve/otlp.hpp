// OpenTelemetry export (`--otlp-endpoint URL` on `sluice serve` and `sluice proxy`): every
// decision event as an OTLP log record and the /metrics counters as OTLP Sum metrics, sent as
// OTLP/HTTP JSON to URL/v1/logs and URL/v1/metrics from one background thread, over http://
// or https:// (OpenSSL: the system CAs or --otlp-ca, the host name verified). A batch the
// collector could not take (no connection, 429, 5xx) is retried with exponential backoff,
// honouring Retry-After; any other 4xx drops it. Export is telemetry, not the record: a bounded
// queue drops its oldest batch when full (sluice_otlp_dropped_total), and the data plane never
// waits for it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sluice/audit/event_sink.hpp"
#include "sluice/base/error.hpp"

namespace sluice::serve {

struct OtlpOptions {
  std::string endpoint;                        ///< http[s]://HOST[:PORT][/PREFIX]
  std::chrono::milliseconds interval{10'000};  ///< metrics export period (--otlp-interval)
  /// Log records held for export, in batches of 512; when full, the oldest batch is dropped.
  std::size_t queue_limit = 4096;
  std::string service_name = "sluice";  ///< resource attribute service.name
  std::string ca_file;  ///< https: PEM CAs to trust (--otlp-ca); empty: the system's
};

/// One cumulative counter value with its attributes (a Prometheus sample of a counter).
struct CounterPoint {
  std::string name;
  std::string description;
  std::vector<std::pair<std::string, std::string>> attributes;
  std::uint64_t value = 0;
};

class OtlpExporter {
 public:
  using Counters = std::function<std::vector<CounterPoint>()>;
  /// Checks the endpoint and starts the export thread; `counters` is read every interval.
  static base::Result<std::shared_ptr<OtlpExporter>> start(OtlpOptions options, Counters counters);
  virtual ~OtlpExporter() = default;
  /// A sink that queues every decision event for export, then passes it on to `next` (may be
  /// null: nothing stored).
  virtual std::shared_ptr<audit::EventSink> wrap(std::shared_ptr<audit::EventSink> next) = 0;
  /// Records dropped: the queue overflowed, or the collector refused them or stayed
  /// unreachable through every retry.
  virtual std::uint64_t dropped() const = 0;
  /// Records the collector took (2xx).
  virtual std::uint64_t exported() const = 0;
  /// Sends what is queued and a last metrics export (one attempt each), then joins.
  virtual void stop() = 0;
};

/// The exporter's own counters, sluice_otlp_exported_total and sluice_otlp_dropped_total: in
/// its metrics export and in serve's /metrics.
std::vector<CounterPoint> otlpCounterPoints(const OtlpExporter& ex);

/// For `sluice proxy`: counts what `sluice serve`'s /metrics counts of the proxy's events
/// (decisions, attempts, bytes) and exports them and the events. `store` may be null.
class OtlpProxyTelemetry {
 public:
  static base::Result<std::unique_ptr<OtlpProxyTelemetry>> start(
      OtlpOptions options, std::shared_ptr<audit::EventSink> store);
  virtual ~OtlpProxyTelemetry() = default;
  /// The sink to give the proxy.
  virtual std::shared_ptr<audit::EventSink> sink() = 0;
  virtual void stop() = 0;
};

}  // namespace sluice::serve
