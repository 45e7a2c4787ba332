// What reading request bodies whole costs at the proxy: searching a body for placeholder tokens
// (per MiB, with no token and with one to swap) and an HMAC signature per request (a small JSON
// body and a 1 MiB one, the whole-body bound), plus the WebSocket frame relay per MiB of text.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "hmac_signature.hpp"
#include "placeholder.hpp"
#include "websocket_frames.hpp"

namespace {

using namespace sluice;

const std::vector<proxy::Placeholder> kPlaceholders = {
    {"API_TOKEN", "sluice_ph_" + std::string(64, 'a'), "api_token", "api"},
    {"OTHER_TOKEN", "sluice_ph_" + std::string(64, 'b'), "other_token", "other"},
};

// A JSON-ish body of `bytes` bytes without any token.
std::string body(std::size_t bytes) {
  std::string out;
  while (out.size() < bytes) out += R"({"id":12345,"name":"widget","tags":["a","b"]},)";
  out.resize(bytes);
  return out;
}

// Detection over a body with no token (the common case: every body on a listener with
// placeholders is searched).
void BM_PlaceholderScanPerMiB(benchmark::State& state) {
  const std::string b = body(1 << 20);
  for (auto _ : state) benchmark::DoNotOptimize(proxy::findPlaceholders(b, "api", kPlaceholders));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * (1 << 20));
}
BENCHMARK(BM_PlaceholderScanPerMiB)->Unit(benchmark::kMicrosecond);

// Detection and swap over a body holding the rule's own token once.
void BM_PlaceholderSwapPerMiB(benchmark::State& state) {
  std::string b = body(1 << 20);
  b.replace(b.size() / 2, kPlaceholders[0].token.size(), kPlaceholders[0].token);
  auto store = policy::makeSecretStore({{"api_token", "sk-live-secret-value"}});
  for (auto _ : state) {
    std::string copy = b;
    std::vector<std::string> names;
    auto hits = proxy::findPlaceholders(copy, "api", kPlaceholders);
    if (hits.own)
      benchmark::DoNotOptimize(
          proxy::swapPlaceholders(copy, "api", store.get(), kPlaceholders, names));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * (1 << 20));
}
BENCHMARK(BM_PlaceholderSwapPerMiB)->Unit(benchmark::kMicrosecond);

// One HMAC-SHA256 signature (GitHub-webhook style: the body) per request, by body size.
void BM_HmacPerRequest(benchmark::State& state) {
  const std::string b = body(static_cast<std::size_t>(state.range(0)));
  policy::HmacSigning h;
  h.key_secret = "k";
  h.header = "X-Hub-Signature-256";
  h.prefix = "sha256=";
  h.message = "${timestamp}.${body}";
  h.timestamp_header = "X-Timestamp";
  auto store = policy::makeSecretStore({{"k", "whsec-benchmark-key"}});
  proxy::HmacParts parts{"POST", "/hook", "", b, 1700000000};
  for (auto _ : state) benchmark::DoNotOptimize(proxy::hmacHeaders(h, parts, store.get()));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_HmacPerRequest)->Arg(256)->Arg(1 << 20)->Unit(benchmark::kMicrosecond);

// The WebSocket relay over 1 MiB of masked 4 KiB text frames, searched for placeholders.
void BM_WebSocketTextRelayPerMiB(benchmark::State& state) {
  std::string wire;
  const std::string payload = body(4096);
  while (wire.size() < (1 << 20))
    wire += proxy::ws::makeFrame(proxy::ws::kText, payload, true, {1, 2, 3, 4});
  for (auto _ : state) {
    proxy::ws::FrameRelay relay(
        [](std::string& m) {
          auto hits = proxy::findPlaceholders(m, "api", kPlaceholders);
          return hits.leak ? proxy::ws::TextVerdict::kRefuse : proxy::ws::TextVerdict::kPass;
        },
        1 << 20);
    std::string in = wire, out;
    benchmark::DoNotOptimize(relay.feed(in, out));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(wire.size()));
}
BENCHMARK(BM_WebSocketTextRelayPerMiB)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
