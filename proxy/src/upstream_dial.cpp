// Resolve, vet, dial (upstream_dial.hpp).
#include "upstream_dial.hpp"

namespace sluice::proxy {

namespace {

using policy::Reason;

struct ResolveResult {
  std::vector<policy::IpAddress> addrs;
  std::string error;
};

// Runs the (blocking) resolver on the resolver pool and completes on the caller's executor.
template <typename Token>
auto asyncResolve(std::shared_ptr<Context> ctx, std::string host, Token&& token) {
  return net::async_initiate<Token, void(ResolveResult)>(
      [](auto handler, std::shared_ptr<Context> ctx, std::string host) {
        auto work = net::make_work_guard(net::get_associated_executor(handler));
        net::thread_pool& pool = ctx->resolve_pool->get();
        net::post(pool, [ctx = std::move(ctx), host = std::move(host), handler = std::move(handler),
                         work = std::move(work)]() mutable {
          ResolveResult res;
          auto r = ctx->resolver->resolve(host);
          if (r)
            res.addrs = std::move(*r);
          else
            res.error = r.error();
          auto ex = work.get_executor();
          net::post(ex, [handler = std::move(handler), res = std::move(res)]() mutable {
            handler(std::move(res));
          });
        });
      },
      token, std::move(ctx), std::move(host));
}

}  // namespace

tcp::endpoint toEndpoint(const policy::IpAddress& a, std::uint16_t port) {
  if (a.isV4()) return {net::ip::address_v4(a.v4HostOrder()), port};
  net::ip::address_v6::bytes_type b;
  std::copy(a.bytes().begin(), a.bytes().end(), b.begin());
  return {net::ip::address_v6(b), port};
}

policy::IpAddress toIpAddress(const tcp::endpoint& ep) {
  if (ep.address().is_v4()) return policy::IpAddress::v4(ep.address().to_v4().to_uint());
  std::array<std::uint8_t, 16> b{};
  auto bytes = ep.address().to_v6().to_bytes();
  std::copy(bytes.begin(), bytes.end(), b.begin());
  return policy::IpAddress::v6(b);
}

net::awaitable<std::expected<std::vector<VettedAddress>, Refusal>> vetAddresses(
    std::shared_ptr<Context> ctx, std::shared_ptr<const policy::Matcher> matcher, policy::Query q,
    std::string rule_id) {
  const policy::Target& target = q.target;
  std::vector<policy::IpAddress> addrs;
  if (target.ip) {
    addrs.push_back(*target.ip);
  } else {
    auto res = co_await asyncResolve(ctx, target.host, net::use_awaitable);
    if (!res.error.empty())
      co_return std::unexpected(
          networkFailure(Reason::kUpstreamError, kFailureDns, res.error, rule_id));
    addrs = std::move(res.addrs);
  }
  std::vector<VettedAddress> out;
  for (const auto& a : addrs) {
    q.address = &a;
    auto d = matcher->decide(q);
    if (!d.allowed) {
      auto r = denialRefusal(d);
      if (r.detail.find(a.str()) == std::string::npos) r.detail += " (address " + a.str() + ")";
      r.address = a;
      co_return std::unexpected(std::move(r));
    }
    auto ep = toEndpoint(a, target.port);
    if (ctx->isOwnEndpoint(ep))
      co_return std::unexpected(
          refusal(Reason::kProxyLoop,
                  "destination " + target.authority() + " is this proxy's own listener", rule_id));
    out.push_back({ep, a, std::move(d)});
  }
  co_return out;
}

net::awaitable<std::expected<VettedAddress, Refusal>> dialVetted(
    std::shared_ptr<Context> ctx, tcp::socket& sock, Watch& watch,
    const std::vector<VettedAddress>& addrs, const policy::Target& target, std::string rule_id,
    std::shared_ptr<void> keep) {
  ErrorCode ec;
  bool timed_out = false;
  auto deadline = Clock::now() + ctx->options.connect_timeout;
  for (const auto& a : addrs) {
    ErrorCode ignored;
    sock.close(ignored);
    {
      Deadline d(watch, sock, deadline, [&] { return keep; });
      co_await sock.async_connect(a.endpoint, net::redirect_error(net::use_awaitable, ec));
      if (ec && d.fired()) timed_out = true;
    }
    if (!ec) {
      sock.set_option(tcp::no_delay(true), ignored);
      co_return a;
    }
    if (timed_out) break;
  }
  if (timed_out)
    co_return std::unexpected(
        networkFailure(Reason::kUpstreamTimeout, kFailureTimeout,
                       "connecting to " + target.authority() + " timed out after " +
                           std::to_string(ctx->options.connect_timeout.count()) + " ms",
                       rule_id));
  co_return std::unexpected(networkFailure(Reason::kUpstreamError, failureOf(ec),
                                           "cannot connect to " + target.authority() + " (" +
                                               addrs.back().endpoint.address().to_string() +
                                               "): " + ec.message(),
                                           rule_id));
}

}  // namespace sluice::proxy
