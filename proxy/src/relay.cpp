// The per-thread pool of relay buffers, and the header writer of a message relayed whole
// (relay.hpp).
#include "relay.hpp"

#include <cstring>

namespace sluice::proxy {
namespace {

constexpr std::size_t kPoolSize = 64;

std::vector<std::unique_ptr<char[]>>& pool() {
  thread_local std::vector<std::unique_ptr<char[]>> p;
  return p;
}

// Appends `s` at `out[at]` when it fits in `cap`; false otherwise.
bool put(char* out, std::size_t cap, std::size_t& at, std::string_view s) {
  if (s.size() > cap - at) return false;
  std::memcpy(out + at, s.data(), s.size());
  at += s.size();
  return true;
}

// Every field as Beast stores it ("name: value\r\n"), then the empty line; 0 when it does not
// fit.
std::size_t putFields(const PmrFields& f, char* out, std::size_t cap, std::size_t at) {
  for (const auto& field : f) {
    const auto name = field.name_string();
    const auto value = field.value();
    if (!put(out, cap, at, {name.data(), name.size()}) || !put(out, cap, at, ": ") ||
        !put(out, cap, at, {value.data(), value.size()}) || !put(out, cap, at, "\r\n"))
      return 0;
  }
  return put(out, cap, at, "\r\n") ? at : 0;
}

// "HTTP/X.Y" for a message's version (11 -> "HTTP/1.1").
std::string_view httpVersion(unsigned version, char (&buf)[8]) {
  std::memcpy(buf, "HTTP/", 5);
  buf[5] = static_cast<char>('0' + version / 10 % 10);
  buf[6] = '.';
  buf[7] = static_cast<char>('0' + version % 10);
  return {buf, sizeof buf};
}

}  // namespace

// The same bytes as Beast's fields writer: "<method> <target> HTTP/X.Y\r\n" for a request,
// "HTTP/X.Y ### <reason>\r\n" for a response (the status's standard reason when it has none).
std::size_t formatHeader(const http::request_header<PmrFields>& h, char* out, std::size_t cap) {
  const auto method = h.method_string();
  const auto target = h.target();
  char version[8];
  std::size_t at = 0;
  if (!put(out, cap, at, {method.data(), method.size()}) || !put(out, cap, at, " ") ||
      !put(out, cap, at, {target.data(), target.size()}) || !put(out, cap, at, " ") ||
      !put(out, cap, at, httpVersion(h.version(), version)) || !put(out, cap, at, "\r\n"))
    return 0;
  return putFields(h, out, cap, at);
}

std::size_t formatHeader(const http::response_header<PmrFields>& h, char* out, std::size_t cap) {
  const unsigned code = h.result_int();
  const char status[] = {' ', static_cast<char>('0' + code / 100 % 10),
                         static_cast<char>('0' + code / 10 % 10),
                         static_cast<char>('0' + code % 10), ' '};
  auto reason = h.reason();
  if (reason.empty()) reason = http::obsolete_reason(static_cast<http::status>(code));
  char version[8];
  std::size_t at = 0;
  if (!put(out, cap, at, httpVersion(h.version(), version)) ||
      !put(out, cap, at, {status, sizeof status}) ||
      !put(out, cap, at, {reason.data(), reason.size()}) || !put(out, cap, at, "\r\n"))
    return 0;
  return putFields(h, out, cap, at);
}

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
