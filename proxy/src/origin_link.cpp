// Plain-HTTP origin connections (origin_link.hpp).
#include "origin_link.hpp"

#include "log.hpp"
#include "shadow.hpp"

namespace sluice::proxy {

OriginLink::OriginLink(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener,
                       std::shared_ptr<Account> account, const net::any_io_executor& ex,
                       std::function<std::shared_ptr<void>()> keep)
    : ctx_(std::move(ctx)),
      listener_(std::move(listener)),
      account_(std::move(account)),
      ex_(ex),
      keep_(std::move(keep)) {}

OriginLink::~OriginLink() { close(); }

const policy::IpAddress* OriginLink::openTo(const policy::Target& target) {
  if (!origin_) return nullptr;
  if (origin_->target.host != target.host || origin_->target.port != target.port) {
    close();
    return nullptr;
  }
  // Bytes no request asked for (an upstream that read a second request out of a body, or a
  // stray response): this connection must not answer the next request.
  if (origin_->buf.size() > 0 || hasUnread(origin_->socket)) {
    ErrorCode ec;
    if (origin_->buf.size() > 0 || origin_->socket.available(ec) > 0)
      log().warn("origin {} sent bytes no request asked for; connection closed",
                 origin_->target.authority());
    close();
    return nullptr;
  }
  return &origin_->address;
}

net::awaitable<std::expected<VettedAddress, Refusal>> OriginLink::dial(
    const std::vector<VettedAddress>& addrs, const policy::Target& target,
    const std::string& rule_id) {
  close();
  auto o = std::make_unique<Origin>(ex_);
  auto dialled = co_await dialVetted(ctx_, o->socket, o->watch, addrs, target, rule_id, keep_());
  if (!dialled) co_return dialled;
  o->target = target;
  o->address = dialled->address;
  o->started = Clock::now();
  const auto p = policy_();
  o->event =
      connectionRow(*ctx_, *listener_, p.workflow(), audit::ConnectionKind::kHttp, p.generation);
  o->event.host = target.host;
  o->event.port = target.port;
  allowConnection(o->event, dialled->endpoint, dialled->decision);
  origin_ = std::move(o);
  co_return dialled;
}

void OriginLink::close() {
  if (!origin_) return;
  ErrorCode ec;
  origin_->socket.close(ec);
  origin_->watch.timer.cancel();
  finishConnection(*ctx_, *account_, origin_->event, origin_->started);
  account_->releaseConnection();
  origin_.reset();
}

void OriginLink::abort() {
  if (!origin_) return;
  ErrorCode ec;
  origin_->socket.close(ec);
  origin_->watch.timer.cancel();
}

std::string OriginLink::refusedConnection(const policy::Target* target, const Refusal& r,
                                          const audit::PolicyStamp& request) {
  const auto p = policy_();
  auto ev =
      connectionRow(*ctx_, *listener_, p.workflow(), audit::ConnectionKind::kHttp, p.generation);
  if (target) {
    ev.host = target->host;
    ev.port = target->port;
  }
  auto id = ev.id;
  shadowOfRequest(ev, request);
  recordDeniedConnection(*ctx_, *account_, std::move(ev), r);
  return id;
}

}  // namespace sluice::proxy
