// DNS wire format: one query in, one response out (see dns_message.hpp for the scope and why
// sluice has its own small codec rather than ldns).
#include "dns_message.hpp"

#include <array>

namespace sluice::proxy::dns {
namespace {

constexpr std::size_t kHeaderSize = 12;
constexpr std::size_t kMaxNameWire = 255;  // RFC 1035 2.3.4, length octets included

// Bounds-checked big-endian reader over one message.
class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> m) : m_(m) {}
  std::size_t pos() const { return pos_; }
  void seek(std::size_t p) { pos_ = p; }
  bool has(std::size_t n) const { return pos_ <= m_.size() && m_.size() - pos_ >= n; }
  std::uint8_t at(std::size_t p) const { return m_[p]; }
  std::size_t size() const { return m_.size(); }
  bool u16(std::uint16_t& v) {
    if (!has(2)) return false;
    v = static_cast<std::uint16_t>((m_[pos_] << 8) | m_[pos_ + 1]);
    pos_ += 2;
    return true;
  }
  bool u32(std::uint32_t& v) {
    std::uint16_t hi = 0, lo = 0;
    if (!u16(hi) || !u16(lo)) return false;
    v = (std::uint32_t{hi} << 16) | lo;
    return true;
  }
  bool skip(std::size_t n) {
    if (!has(n)) return false;
    pos_ += n;
    return true;
  }

 private:
  std::span<const std::uint8_t> m_;
  std::size_t pos_ = 0;
};

bool plainByte(std::uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// Reads a name at the reader's position; leaves the reader after it. The question's name
// (`out` given) may not be compressed: it is the message's first name, so a pointer could only
// point into the header or make the name re-read its own bytes (a short query expanding to a
// 255-byte name), and no stub resolver sends one. Elsewhere a pointer must point past the
// header and before the previous one's target (strictly backwards), so following them always
// ends: no pointer loop can be built.
bool readName(Reader& r, Question* out, std::string& problem) {
  std::size_t p = r.pos();
  std::size_t end = 0;    // where the name ends in the message (after the first pointer)
  std::size_t limit = p;  // a pointer must point below this
  std::size_t wire_len = 1;
  for (;;) {
    if (p >= r.size()) {
      problem = "name runs past the end of the message";
      return false;
    }
    const std::uint8_t len = r.at(p);
    if ((len & 0xC0) == 0xC0) {
      if (out) {
        problem = "compression pointer in the question";
        return false;
      }
      if (p + 1 >= r.size()) {
        problem = "truncated compression pointer";
        return false;
      }
      const std::size_t target = (std::size_t{len & 0x3Fu} << 8) | r.at(p + 1);
      if (target >= limit || target < kHeaderSize) {
        problem = "compression pointer does not point backwards (loop) or into the header";
        return false;
      }
      if (end == 0) end = p + 2;
      limit = target;
      p = target;
      continue;
    }
    if ((len & 0xC0) != 0) {
      problem = "unsupported label type";
      return false;
    }
    if (len == 0) {
      if (end == 0) end = p + 1;
      if (out) out->wire.push_back('\0');
      break;
    }
    if (p + 1 + len > r.size()) {
      problem = "label runs past the end of the message";
      return false;
    }
    wire_len += 1u + len;
    if (wire_len > kMaxNameWire) {
      problem = "name longer than 255 bytes";
      return false;
    }
    if (out) {
      out->wire.push_back(static_cast<char>(len));
      if (!out->name.empty()) out->name.push_back('.');
      for (std::size_t i = 0; i < len; ++i) {
        std::uint8_t c = r.at(p + 1 + i);
        out->wire.push_back(static_cast<char>(c));
        if (c >= 'A' && c <= 'Z') c = static_cast<std::uint8_t>(c - 'A' + 'a');
        if (plainByte(c)) {
          out->name.push_back(static_cast<char>(c));
        } else {
          // RFC 4343 \DDD: keeps dots inside labels, control bytes and non-ASCII visible.
          out->plain = false;
          out->name.push_back('\\');
          out->name.push_back(static_cast<char>('0' + c / 100));
          out->name.push_back(static_cast<char>('0' + c / 10 % 10));
          out->name.push_back(static_cast<char>('0' + c % 10));
        }
      }
    }
    p += 1u + len;
  }
  r.seek(end);
  return true;
}

// One resource record of the additional section; records the OPT record's fields.
bool readAdditional(Reader& r, Parsed& out) {
  std::size_t name_at = r.pos();
  if (!readName(r, nullptr, out.problem)) return false;
  std::uint16_t type = 0, klass = 0, rdlen = 0;
  std::uint32_t ttl = 0;
  if (!r.u16(type) || !r.u16(klass) || !r.u32(ttl) || !r.u16(rdlen)) {
    out.problem = "additional record truncated";
    return false;
  }
  std::size_t rdata_at = r.pos();
  if (!r.skip(rdlen)) {
    out.problem = "additional record data runs past the end";
    return false;
  }
  if (type != kTypeOpt) return true;  // other additional records (cookies, TSIG) are ignored
  if (out.query.edns) {
    out.problem = "more than one OPT record";
    return false;
  }
  if (r.at(name_at) != 0) {
    out.problem = "OPT record not owned by the root";
    return false;
  }
  // The options must tile the data exactly (RFC 6891 6.1.2).
  for (std::size_t p = rdata_at; p < rdata_at + rdlen;) {
    if (rdata_at + rdlen - p < 4) {
      out.problem = "EDNS option truncated";
      return false;
    }
    std::size_t olen = (std::size_t{r.at(p + 2)} << 8) | r.at(p + 3);
    if (rdata_at + rdlen - p - 4 < olen) {
      out.problem = "EDNS option runs past its record";
      return false;
    }
    p += 4 + olen;
  }
  out.query.edns = true;
  out.query.udp_payload = klass < kUdpPlainLimit ? kUdpPlainLimit : klass;
  out.query.edns_version = static_cast<std::uint8_t>(ttl >> 16);
  return true;
}

void put16(std::vector<std::uint8_t>& b, std::uint16_t v) {
  b.push_back(static_cast<std::uint8_t>(v >> 8));
  b.push_back(static_cast<std::uint8_t>(v));
}

}  // namespace

std::string rcodeName(Rcode r) {
  switch (r) {
    case Rcode::kNoError:
      return "NOERROR";
    case Rcode::kFormErr:
      return "FORMERR";
    case Rcode::kServFail:
      return "SERVFAIL";
    case Rcode::kNxDomain:
      return "NXDOMAIN";
    case Rcode::kNotImp:
      return "NOTIMP";
    case Rcode::kRefused:
      return "REFUSED";
    case Rcode::kBadVers:
      return "BADVERS";
  }
  return "RCODE" + std::to_string(static_cast<int>(r));
}

std::string qtypeName(std::uint16_t type) {
  static constexpr std::array<std::pair<std::uint16_t, const char*>, 20> kNames = {{
      {1, "A"},    {2, "NS"},     {5, "CNAME"},   {6, "SOA"},   {12, "PTR"},
      {15, "MX"},  {16, "TXT"},   {28, "AAAA"},   {33, "SRV"},  {35, "NAPTR"},
      {41, "OPT"}, {43, "DS"},    {48, "DNSKEY"}, {64, "SVCB"}, {65, "HTTPS"},
      {99, "SPF"}, {251, "IXFR"}, {252, "AXFR"},  {255, "ANY"}, {257, "CAA"},
  }};
  for (const auto& [t, n] : kNames)
    if (t == type) return n;
  return "TYPE" + std::to_string(type);
}

Parsed parseQuery(std::span<const std::uint8_t> msg) {
  Parsed out;
  if (msg.size() < kHeaderSize) {
    // With an id and the QR bit we can still say FORMERR; anything shorter is dropped.
    if (msg.size() < 3 || (msg[2] & 0x80)) {
      out.drop = true;
    } else {
      out.query.id = static_cast<std::uint16_t>((msg[0] << 8) | msg[1]);
      out.error = Rcode::kFormErr;
    }
    out.problem = "shorter than a DNS header";
    return out;
  }
  Reader r(msg);
  std::uint16_t flags = 0, qd = 0, an = 0, ns = 0, ar = 0;
  r.u16(out.query.id);
  r.u16(flags);
  r.u16(qd);
  r.u16(an);
  r.u16(ns);
  r.u16(ar);
  if (flags & 0x8000) {
    out.drop = true;
    out.problem = "a response, not a query";
    return out;
  }
  out.query.recursion_desired = (flags & 0x0100) != 0;
  if (const int opcode = (flags >> 11) & 0xF; opcode != 0) {
    out.error = Rcode::kNotImp;
    out.problem = "opcode " + std::to_string(opcode) + " (only QUERY is served)";
    return out;
  }
  if (qd != 1) {
    out.error = Rcode::kFormErr;
    out.problem = std::to_string(qd) + " questions (exactly one is allowed)";
    return out;
  }
  if (an != 0 || ns != 0) {
    out.error = Rcode::kFormErr;
    out.problem = "a query with answer or authority records";
    return out;
  }
  Question q;
  if (!readName(r, &q, out.problem)) {
    out.error = Rcode::kFormErr;
    return out;
  }
  if (!r.u16(q.type) || !r.u16(q.klass)) {
    out.error = Rcode::kFormErr;
    out.problem = "question truncated";
    return out;
  }
  out.query.question = std::move(q);
  for (std::uint16_t i = 0; i < ar; ++i) {
    if (!readAdditional(r, out)) {
      out.error = Rcode::kFormErr;
      return out;
    }
  }
  if (r.pos() != msg.size()) {
    out.error = Rcode::kFormErr;
    out.problem = "trailing bytes after the last record";
  }
  return out;
}

std::vector<std::uint8_t> buildResponse(const Query& q, Rcode rcode,
                                        const std::optional<policy::IpAddress>& answer,
                                        std::size_t limit) {
  const auto code = static_cast<std::uint16_t>(rcode);
  bool with_question = q.question.has_value();
  bool with_answer = answer.has_value() && with_question;
  bool truncated = false;
  auto size = [&] {
    std::size_t n = kHeaderSize;
    if (with_question) n += q.question->wire.size() + 4;
    if (with_answer) n += 2 + 10 + (answer->isV4() ? 4 : 16);
    if (q.edns) n += 11;
    return n;
  };
  if (size() > limit) {
    with_answer = false;
    truncated = true;
  }
  if (size() > limit) with_question = false;

  std::vector<std::uint8_t> b;
  b.reserve(size());
  put16(b, q.id);
  // QR, AA (sluice is the authority for every name it answers), RD echoed, RA (the sandbox
  // has no other resolver: stub resolvers warn when RA is clear), TC when truncated.
  std::uint16_t flags = 0x8000 | 0x0400 | 0x0080 | (code & 0xF);
  if (q.recursion_desired) flags |= 0x0100;
  if (truncated) flags |= 0x0200;
  put16(b, flags);
  put16(b, with_question ? 1 : 0);
  put16(b, with_answer ? 1 : 0);
  put16(b, 0);
  put16(b, q.edns ? 1 : 0);
  if (with_question) {
    b.insert(b.end(), q.question->wire.begin(), q.question->wire.end());
    put16(b, q.question->type);
    put16(b, q.question->klass);
  }
  if (with_answer) {
    put16(b, 0xC000 | kHeaderSize);  // the question's name
    put16(b, answer->isV4() ? kTypeA : kTypeAAAA);
    put16(b, kClassIn);
    put16(b, 0);
    put16(b, 1);  // TTL 1 s: the mapping is per execution and must not outlive it in caches
    const auto& bytes = answer->bytes();
    if (answer->isV4()) {
      put16(b, 4);
      const std::uint32_t v = answer->v4HostOrder();
      put16(b, static_cast<std::uint16_t>(v >> 16));
      put16(b, static_cast<std::uint16_t>(v));
    } else {
      put16(b, 16);
      b.insert(b.end(), bytes.begin(), bytes.end());
    }
  }
  if (q.edns) {
    b.push_back(0);  // root
    put16(b, kTypeOpt);
    put16(b, static_cast<std::uint16_t>(kUdpEdnsLimit));
    b.push_back(static_cast<std::uint8_t>(code >> 4));  // extended rcode (BADVERS)
    b.push_back(0);                                     // version 0
    put16(b, 0);                                        // flags: no DO (no DNSSEC)
    put16(b, 0);                                        // no options
  }
  return b;
}

}  // namespace sluice::proxy::dns
