// Sniffing the start of a byte stream (sniff.hpp).
#include "sniff.hpp"

#include <algorithm>
#include <cctype>

namespace sluice::proxy {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!out.empty() && out.back() == '.') out.pop_back();
  return out;
}

// A reader over bytes that fails (instead of reading past the end) on malformed input.
struct Reader {
  std::string_view b;
  std::size_t at = 0;
  bool ok = true;
  std::size_t u8() {
    if (at + 1 > b.size()) return ok = false, 0;
    return static_cast<unsigned char>(b[at++]);
  }
  // The operands of | are unsequenced: each byte is read in a statement of its own.
  std::size_t u16() {
    const std::size_t hi = u8();
    return (hi << 8) | u8();
  }
  std::size_t u24() {
    const std::size_t hi = u8();
    return (hi << 16) | u16();
  }
  void skip(std::size_t n) {
    if (at + n > b.size()) ok = false;
    at = std::min(b.size(), at + n);
  }
};

}  // namespace

Opening classifyOpening(std::string_view b) {
  if (b.empty()) return Opening::kMore;
  // A TLS record of type handshake (ClientHello): 0x16, then the version's major byte 3.
  if (static_cast<unsigned char>(b[0]) == 0x16) {
    if (b.size() < 2) return Opening::kMore;
    return b[1] == 0x03 ? Opening::kTls : Opening::kOther;
  }
  // An HTTP request line: a method token of letters, then a space.
  for (std::size_t i = 0; i < b.size() && i < 24; ++i) {
    char c = b[i];
    if (c == ' ') return i > 0 ? Opening::kHttp : Opening::kOther;
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '-' || c == '_'))
      return Opening::kOther;
  }
  return b.size() < 24 ? Opening::kMore : Opening::kOther;
}

NameInOpening sniOf(std::string_view bytes) {
  // TLS record: type 22 (handshake), version, length; then the ClientHello handshake message.
  if (bytes.size() < 5) return {Peeked::kMore, ""};
  Reader rec{bytes};
  if (rec.u8() != 22) return {Peeked::kAbsent, ""};
  rec.skip(2);
  const std::size_t record_len = rec.u16();
  if (bytes.size() < 5 + record_len)
    return {record_len > 16384 ? Peeked::kAbsent : Peeked::kMore, ""};
  Reader r{bytes.substr(5, record_len)};
  if (r.u8() != 1) return {Peeked::kAbsent, ""};  // ClientHello
  const std::size_t hello_len = r.u24();
  if (hello_len + 4 > record_len) return {Peeked::kAbsent, ""};  // split across records: give up
  r.skip(2 + 32);                                                // version, random
  r.skip(r.u8());                                                // session id
  r.skip(r.u16());                                               // cipher suites
  r.skip(r.u8());                                                // compression methods
  if (!r.ok || r.at + 2 > r.b.size()) return {Peeked::kAbsent, ""};
  const std::size_t ext_len = r.u16();  // read before r.at: the two are unsequenced in one sum
  const std::size_t ext_end = std::min(r.b.size(), r.at + ext_len);
  while (r.ok && r.at + 4 <= ext_end) {
    const std::size_t type = r.u16(), len = r.u16();
    if (type != 0) {  // server_name
      r.skip(len);
      continue;
    }
    Reader e{r.b.substr(r.at, std::min(len, r.b.size() - r.at))};
    const std::size_t list_end = 2 + e.u16();
    while (e.ok && e.at + 3 <= std::min(list_end, e.b.size())) {
      const std::size_t name_type = e.u8(), name_len = e.u16();
      if (!e.ok || e.at + name_len > e.b.size()) break;
      if (name_type == 0 && name_len > 0 && name_len <= 253)
        return {Peeked::kFound, lower(e.b.substr(e.at, name_len))};
      e.skip(name_len);
    }
    return {Peeked::kAbsent, ""};
  }
  return {Peeked::kAbsent, ""};
}

NameInOpening httpHostOf(std::string_view bytes) {
  const auto end = bytes.find("\r\n\r\n");
  if (end == std::string_view::npos)
    return {bytes.size() > 65536 ? Peeked::kAbsent : Peeked::kMore, ""};
  std::string_view head = bytes.substr(0, end + 2);
  std::size_t at = head.find("\r\n");
  while (at != std::string_view::npos && at + 2 < head.size()) {
    const std::size_t start = at + 2;
    const std::size_t stop = head.find("\r\n", start);
    std::string_view line = head.substr(start, stop - start);
    at = stop;
    if (line.size() < 5 || lower(line.substr(0, 5)) != "host:") continue;
    std::string_view v = line.substr(5);
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    if (!v.empty() && v.front() == '[') {  // [v6]:port
      const auto close = v.find(']');
      if (close == std::string_view::npos) return {Peeked::kAbsent, ""};
      return {Peeked::kFound, std::string(v.substr(1, close - 1))};
    }
    if (const auto colon = v.rfind(':'); colon != std::string_view::npos) v = v.substr(0, colon);
    if (v.empty()) return {Peeked::kAbsent, ""};
    return {Peeked::kFound, lower(v)};
  }
  return {Peeked::kAbsent, ""};
}

}  // namespace sluice::proxy
