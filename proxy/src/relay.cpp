// The per-thread pool of relay buffers (relay.hpp).
#include "relay.hpp"

namespace sluice::proxy {
namespace {

constexpr std::size_t kPoolSize = 64;

std::vector<std::unique_ptr<char[]>>& pool() {
  thread_local std::vector<std::unique_ptr<char[]>> p;
  return p;
}

}  // namespace

RelayBuffer::RelayBuffer() {
  auto& p = pool();
  if (p.empty()) {
    buf_ = std::make_unique<char[]>(kRelayBufferBytes);
  } else {
    buf_ = std::move(p.back());
    p.pop_back();
  }
}

RelayBuffer::~RelayBuffer() {
  auto& p = pool();
  if (p.size() < kPoolSize) p.push_back(std::move(buf_));
}

}  // namespace sluice::proxy
