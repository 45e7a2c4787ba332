// What AWS SigV4 re-signing (inject.aws_sigv4) costs at the proxy: checking a request's
// signature made with the placeholder key and signing it again with the real one (per request),
// and re-signing a streaming upload's aws-chunked body (throughput), beside SHA-256 alone over
// the same bytes (the floor: every chunk is hashed once).
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>

#include "sigv4.hpp"
#include "sigv4_chunks.hpp"
#include "sluice/base/digest.hpp"

namespace {

namespace sigv4 = sluice::proxy::sigv4;

constexpr sigv4::Credentials kPlaceholder{"AKIAPLACEHOLDER00001",
                                          "placeholder/secret+key0000000000000000000", ""};
constexpr sigv4::Credentials kReal{"AKIAREALREALREAL0002",
                                   "real/secret+key00000000000000000000000000", "session-token"};

// A PutObject as the AWS CLI sends it, signed with the placeholder key.
sigv4::Request putObject(std::string_view payload_hash) {
  sigv4::Request req{"PUT",
                     "/bucket/dir/object-name.bin",
                     {{"Host", "s3.eu-west-3.amazonaws.com"},
                      {"User-Agent", "aws-cli/2.9.19 Python/3.11.2 Linux"},
                      {"Content-MD5", "1B2M2Y8AsgTpgAmY7PhCfg=="},
                      {"Content-Type", "application/octet-stream"},
                      {"Content-Length", "1048576"},
                      {"Expect", "100-continue"},
                      {"x-amz-content-sha256", std::string(payload_hash)},
                      {"x-amz-date", "20260101T000000Z"}}};
  sigv4::Auth a;
  a.access_key_id = kPlaceholder.access_key_id;
  a.date = "20260101";
  a.region = "eu-west-3";
  a.service = "s3";
  a.amz_date = "20260101T000000Z";
  a.payload_hash = std::string(payload_hash);
  a.signed_headers = {"content-md5", "content-type", "host", "x-amz-content-sha256", "x-amz-date"};
  a.signature = sigv4::hmacHex(sigv4::signingKey(kPlaceholder.secret_access_key, a),
                               sigv4::stringToSign(a, sigv4::canonicalRequest(req, a)));
  req.headers.emplace_back("Authorization",
                           "AWS4-HMAC-SHA256 Credential=" + a.access_key_id + "/" + a.scope() +
                               ", SignedHeaders=content-md5;content-type;host;x-amz-content-sha256;"
                               "x-amz-date, Signature=" +
                               a.signature);
  return req;
}

void BM_VerifyAndResign(benchmark::State& state) {
  const sigv4::Request req = putObject(sigv4::kUnsignedPayload);
  const auto now = std::chrono::system_clock::now();
  for (auto _ : state) {
    auto v = sigv4::verify(req, kPlaceholder);
    if (!v) {
      state.SkipWithError(v.error().detail.c_str());
      break;
    }
    auto r = sigv4::resign(req, *v, kReal, now);
    benchmark::DoNotOptimize(r);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()));
}
BENCHMARK(BM_VerifyAndResign)->Unit(benchmark::kMicrosecond);

// A body of `chunks` chunks of `chunk` bytes signed with `chain`.
std::string chunkedBody(sigv4::ChunkChain chain, std::size_t chunk, std::size_t chunks) {
  std::string body;
  const std::string data(chunk, 'a');
  const std::string hash = sluice::base::sha256Hex(data);
  char hex[16];
  std::snprintf(hex, sizeof hex, "%zx", chunk);
  for (std::size_t i = 0; i < chunks; ++i) {
    chain.previous = sigv4::chunkSignature(chain, hash);
    body += std::string(hex) + ";chunk-signature=" + chain.previous + "\r\n" + data + "\r\n";
  }
  chain.previous = sigv4::chunkSignature(chain, sigv4::kEmptyHash);
  return body + "0;chunk-signature=" + chain.previous + "\r\n\r\n";
}

// The body fed in 32 KiB pieces, as the proxy's relay reads it.
void BM_ChunkResign(benchmark::State& state) {
  const sigv4::Request req = putObject(sigv4::kStreamingPayload);
  auto v = sigv4::verify(req, kPlaceholder);
  if (!v) {
    state.SkipWithError(v.error().detail.c_str());
    return;
  }
  auto r = sigv4::resign(req, *v, kReal, std::chrono::system_clock::now());
  const auto ph = sigv4::chainOf(*v, kPlaceholder.secret_access_key);
  const auto real = sigv4::chainOf(r->auth, kReal.secret_access_key);
  const std::string body = chunkedBody(ph, static_cast<std::size_t>(state.range(0)), 64);
  std::string out;
  for (auto _ : state) {
    sigv4::ChunkResigner t(ph, real);
    for (std::size_t i = 0; i < body.size(); i += 32 * 1024) {
      out.clear();
      if (!t.feed(std::string_view(body).substr(i, 32 * 1024), out)) {
        state.SkipWithError(t.error().c_str());
        return;
      }
      benchmark::DoNotOptimize(out.data());
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_ChunkResign)->Arg(8 << 10)->Arg(64 << 10)->Unit(benchmark::kMillisecond);

// The floor: SHA-256 over the same number of bytes, in the same pieces.
void BM_Sha256Floor(benchmark::State& state) {
  const std::string body(static_cast<std::size_t>(state.range(0)) * 64, 'a');
  for (auto _ : state) {
    sluice::base::Sha256 h;
    for (std::size_t i = 0; i < body.size(); i += 32 * 1024)
      h.update(std::string_view(body).substr(i, 32 * 1024));
    benchmark::DoNotOptimize(h.finish());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
}
BENCHMARK(BM_Sha256Floor)->Arg(8 << 10)->Arg(64 << 10)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
