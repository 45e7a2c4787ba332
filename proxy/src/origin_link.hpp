// The upstream side of plain HTTP from a client connection: one kept-alive origin connection
// at a time, (re)dialled on demand to whatever target a request names, once the admission
// (admission.hpp) has vetted every resolved address. Each origin connection gets its own
// connections row.
#pragma once

#include <memory>

#include "link.hpp"

namespace sluice::proxy {

class OriginLink final : public UpstreamLink<tcp::socket> {
 public:
  /// `keep` returns a reference that keeps the owning connection alive while timers run.
  OriginLink(std::shared_ptr<Context> ctx, std::shared_ptr<Listener> listener,
             std::shared_ptr<Account> account, const net::any_io_executor& ex,
             std::function<std::shared_ptr<void>()> keep);
  ~OriginLink() override;

  /// Where the rows' workflow and generation come from: the owner's policy of the request being
  /// handled (so a live update or reload names the policy that decided).
  void policyFrom(std::function<PolicySnapshot()> current) { policy_ = std::move(current); }

  const policy::IpAddress* openTo(const policy::Target& target) override;
  std::optional<Refusal> cannotDial(const std::string&) const override { return std::nullopt; }
  net::awaitable<std::expected<VettedAddress, Refusal>> dial(
      const std::vector<VettedAddress>& addrs, const policy::Target& target,
      const std::string& rule_id) override;
  tcp::socket& stream() override { return origin_->socket; }
  Watch& watch() override { return origin_->watch; }
  beast::flat_buffer& buffer() override { return origin_->buf; }
  audit::ConnectionEvent& row() override { return origin_->event; }
  bool reused() const override { return origin_ && origin_->uses > 0; }
  bool canRedial() const override { return true; }
  void used() override { ++origin_->uses; }
  void close() override;
  std::string refusedConnection(const policy::Target* target, const Refusal& r,
                                const audit::PolicyStamp& request) override;

  /// Cancels a pending deadline timer (the owner is ending) and closes the socket.
  void abort();

 private:
  struct Origin {
    explicit Origin(const net::any_io_executor& ex) : socket(ex), watch(ex) {}
    tcp::socket socket;
    Watch watch;
    beast::flat_buffer buf;
    policy::Target target;
    policy::IpAddress address;
    audit::ConnectionEvent event;
    Clock::time_point started;
    std::uint64_t uses = 0;
  };

  std::shared_ptr<Context> ctx_;
  std::shared_ptr<Listener> listener_;
  std::shared_ptr<Account> account_;  // what origin connections are charged to
  std::function<PolicySnapshot()> policy_;
  net::any_io_executor ex_;
  std::function<std::shared_ptr<void>()> keep_;
  std::unique_ptr<Origin> origin_;
};

}  // namespace sluice::proxy
