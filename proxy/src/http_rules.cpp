// HTTP/1.1 smuggling checks, hop-by-hop stripping, Host agreement and refusal rendering.
#include "http_rules.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace sluice::proxy {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::vector<std::string> tokens(std::string_view list) {
  std::vector<std::string> out;
  while (!list.empty()) {
    auto comma = list.find(',');
    auto tok = trim(list.substr(0, comma));
    if (!tok.empty()) out.emplace_back(tok);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace

std::optional<std::string> checkHeaderBlock(std::string_view block) {
  for (std::size_t i = 0; i < block.size(); ++i) {
    char c = block[i];
    // Every byte this checks for is at most CR: one comparison passes all the others.
    if (static_cast<unsigned char>(c) > '\r') continue;
    if (c == '\0') return "NUL byte in the request header";
    if (c == '\n') {
      if (i == 0 || block[i - 1] != '\r') return "bare LF line ending in the request header";
      // RFC 9112 5.2: obs-fold (a field line continued with SP/HTAB) must be rejected by
      // a proxy unless it rewrites it; rejecting removes an ambiguity smugglers use.
      if (i + 1 < block.size() && (block[i + 1] == ' ' || block[i + 1] == '\t'))
        return "obsolete line folding (obs-fold) in the request header";
    }
    if (c == '\r' && (i + 1 >= block.size() || block[i + 1] != '\n'))
      return "bare CR in the request header";
  }
  return std::nullopt;
}

namespace {

template <typename Fields>
std::optional<Refusal> checkFramingImpl(const Fields& fields, unsigned version) {
  auto bad = [](std::string detail) {
    return refusal(policy::Reason::kInvalidRequest, std::move(detail));
  };
  std::size_t cl_count = 0;
  std::size_t te_count = 0;
  std::string_view te_value;
  for (const auto& f : fields) {
    if (f.name() == http::field::content_length) {
      ++cl_count;
      auto v = trim(std::string_view(f.value().data(), f.value().size()));
      if (v.empty() || v.size() > 18 ||
          !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return bad("invalid Content-Length");
    } else if (f.name() == http::field::transfer_encoding) {
      ++te_count;
      te_value = std::string_view(f.value().data(), f.value().size());
    }
  }
  if (cl_count > 1) return bad("duplicate Content-Length");
  if (te_count > 1) return bad("duplicate Transfer-Encoding");
  if (cl_count == 1 && te_count == 1)
    return bad("both Content-Length and Transfer-Encoding (request smuggling shape)");
  if (te_count == 1 && version < 11)
    return bad("Transfer-Encoding on an HTTP/1.0 request (RFC 9112 6.1)");
  if (te_count == 1 && !iequals(trim(te_value), "chunked")) {
    return refusal(
        policy::Reason::kUnsupportedTransferCoding,
        "unsupported Transfer-Encoding '" + std::string(trim(te_value)) + "' (only chunked)");
  }
  return std::nullopt;
}

// The fields no proxy forwards (RFC 9110 7.6.1), whatever Connection lists.
bool alwaysHopByHop(http::field f) {
  switch (f) {
    case http::field::connection:
    case http::field::proxy_connection:
    case http::field::proxy_authorization:
    case http::field::proxy_authenticate:
    case http::field::keep_alive:
    case http::field::te:
    case http::field::trailer:
    case http::field::upgrade:
      return true;
    default:
      return false;
  }
}

// The names the Connection fields list that go too: never the framing fields or Host, and
// none of the always-stripped ones (already going).
template <typename Fields>
std::vector<std::string> listedHopByHop(const Fields& fields) {
  std::vector<std::string> listed;
  for (auto it = fields.find(http::field::connection);
       it != fields.end() && it->name() == http::field::connection; ++it) {
    for (auto& t : tokens(std::string_view(it->value().data(), it->value().size()))) {
      if (iequals(t, "content-length") || iequals(t, "transfer-encoding") || iequals(t, "host") ||
          alwaysHopByHop(http::string_to_field(t)))
        continue;
      listed.push_back(std::move(t));
    }
  }
  return listed;
}

// One pass over the fields in order, erasing by iterator: a lookup per name would walk the
// field set's tree eight times or more per message.
template <typename Fields>
void stripHopByHopImpl(Fields& fields) {
  const std::vector<std::string> listed = listedHopByHop(fields);
  auto is_listed = [&](std::string_view name) {
    return std::any_of(listed.begin(), listed.end(),
                       [&](const std::string& l) { return iequals(l, name); });
  };
  for (auto it = fields.begin(); it != fields.end();) {
    const auto name = it->name_string();
    if (alwaysHopByHop(it->name()) || is_listed(std::string_view(name.data(), name.size())))
      it = fields.erase(it);
    else
      ++it;
  }
}

template <typename Fields>
std::optional<std::string> checkHostAgreesImpl(const Fields& fields, const policy::Target& target,
                                               std::uint16_t default_port) {
  if (fields.count(http::field::host) > 1) return "several Host fields";
  auto it = fields.find(http::field::host);
  if (it == fields.end()) return std::nullopt;
  std::string_view value = trim(std::string_view(it->value().data(), it->value().size()));
  if (value.empty()) return "empty Host field";
  // Split an optional port, minding bracketed IPv6.
  std::string_view host = value;
  std::uint16_t port = default_port;
  auto colon = value.rfind(':');
  bool bracketed = !value.empty() && value.front() == '[';
  if (colon != std::string_view::npos && (!bracketed || colon > value.find(']'))) {
    auto p = value.substr(colon + 1);
    if (p.empty() || p.size() > 5 ||
        !std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return "Host field has an invalid port";
    unsigned v = std::stoul(std::string(p));
    if (v == 0 || v > 65535) return "Host field has an invalid port";
    port = static_cast<std::uint16_t>(v);
    host = value.substr(0, colon);
  }
  auto t = policy::makeTarget(host, port);
  if (!t) return "Host field does not parse: " + t.error();
  if (t->host != target.host || t->port != target.port)
    return "Host field names " + t->authority() + " but the request target is " +
           target.authority();
  return std::nullopt;
}

}  // namespace

// The two field containers in use: pooled (the proxy) and plain (tests, other callers).
std::optional<Refusal> checkFraming(const http::fields& f, unsigned version) {
  return checkFramingImpl(f, version);
}
std::optional<Refusal> checkFraming(const PmrFields& f, unsigned version) {
  return checkFramingImpl(f, version);
}
void stripHopByHop(http::fields& f) { stripHopByHopImpl(f); }
void stripHopByHop(PmrFields& f) { stripHopByHopImpl(f); }
std::optional<std::string> checkHostAgrees(const http::fields& f, const policy::Target& t,
                                           std::uint16_t default_port) {
  return checkHostAgreesImpl(f, t, default_port);
}
std::optional<std::string> checkHostAgrees(const PmrFields& f, const policy::Target& t,
                                           std::uint16_t default_port) {
  return checkHostAgreesImpl(f, t, default_port);
}

std::string hostField(const policy::Target& t, std::uint16_t default_port) {
  if (t.port != default_port) return t.authority();
  return t.ip && !t.ip->isV4() ? "[" + t.host + "]" : t.host;
}

}  // namespace sluice::proxy
