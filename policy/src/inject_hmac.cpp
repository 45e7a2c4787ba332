// `inject.hmac` parsing (inject_hmac.hpp).
#include "inject_hmac.hpp"

#include <algorithm>

namespace sluice::policy {
namespace {

// Fields the proxy owns (framing, hop-by-hop, routing): never set by a signature.
constexpr std::string_view kReserved[] = {
    "host", "content-length", "transfer-encoding", "connection",       "upgrade",
    "te",   "trailer",        "keep-alive",        "proxy-connection", "proxy-authorization"};

class HmacParser {
 public:
  explicit HmacParser(const InjectParseContext& ctx) : ctx_(ctx) {}

  std::optional<HmacSigning> parse(const YAML::Node& n, std::set<std::string>& names) {
    if (!n.IsMap()) {
      error(n, "inject.hmac must be a mapping (key, algorithm, header, encoding, message)");
      return std::nullopt;
    }
    // The loader's mapping check: unknown keys (with the nearest), duplicates.
    if (!ctx_.check_map(
            n, "inject.hmac",
            {"key", "algorithm", "header", "encoding", "message", "prefix", "timestamp_header"}))
      failed_ = true;
    HmacSigning h;
    parseKey(n["key"], n, h, names);
    parseChoices(n, h);
    h.header = headerName(n["header"], n, "header", true);
    h.timestamp_header = headerName(n["timestamp_header"], n, "timestamp_header", false);
    if (!h.header.empty() && strcasecmpEq(h.header, h.timestamp_header))
      error(n["timestamp_header"], "inject.hmac.timestamp_header must differ from its header");
    if (auto p = n["prefix"]) h.prefix = text(p, "inject.hmac.prefix").value_or("");
    parseMessage(n["message"], n, h);
    if (failed_) return std::nullopt;
    return h;
  }

 private:
  void error(const YAML::Node& n, std::string message) {
    ctx_.error(n, std::move(message));
    failed_ = true;
  }

  static bool strcasecmpEq(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) ==
                    std::tolower(static_cast<unsigned char>(y));
           });
  }

  std::optional<std::string> text(const YAML::Node& n, std::string_view what) {
    if (!n.IsScalar()) {
      error(n, std::string(what) + " must be a string");
      return std::nullopt;
    }
    if (n.Scalar().find_first_of("\r\n") != std::string::npos && what != "inject.hmac.message") {
      error(n, std::string(what) + " must not contain line breaks");
      return std::nullopt;
    }
    return n.Scalar();
  }

  void parseKey(const YAML::Node& k, const YAML::Node& parent, HmacSigning& h,
                std::set<std::string>& names) {
    if (!k) return error(parent, "inject.hmac needs 'key: ${secret:NAME}'");
    auto v = text(k, "inject.hmac.key");
    if (!v) return;
    const bool ref = v->starts_with("${secret:") && v->ends_with("}") && v->size() > 10;
    std::string name = ref ? v->substr(9, v->size() - 10) : std::string();
    const bool ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    });
    if (!ok || std::isdigit(static_cast<unsigned char>(name[0])))
      return error(k,
                   "inject.hmac.key must be exactly '${secret:NAME}' (the key never goes in "
                   "the policy)");
    h.key_secret = name;
    names.insert(name);
  }

  void parseChoices(const YAML::Node& n, HmacSigning& h) {
    if (auto a = n["algorithm"]) {
      auto v = text(a, "inject.hmac.algorithm");
      if (v == "sha256")
        h.algorithm = HmacSigning::Algorithm::kSha256;
      else if (v == "sha512")
        h.algorithm = HmacSigning::Algorithm::kSha512;
      else if (v)
        error(a, "inject.hmac.algorithm must be sha256 or sha512, not '" + *v + "'");
    }
    if (auto e = n["encoding"]) {
      auto v = text(e, "inject.hmac.encoding");
      if (v == "hex")
        h.encoding = HmacSigning::Encoding::kHex;
      else if (v == "base64")
        h.encoding = HmacSigning::Encoding::kBase64;
      else if (v)
        error(e, "inject.hmac.encoding must be hex or base64, not '" + *v + "'");
    }
  }

  std::string headerName(const YAML::Node& n, const YAML::Node& parent, const std::string& key,
                         bool required) {
    if (!n) {
      if (required) error(parent, "inject.hmac needs '" + key + "' (the header to set)");
      return {};
    }
    auto v = text(n, "inject.hmac." + key);
    if (!v) return {};
    static constexpr std::string_view kTokenExtra = "!#$%&'*+-.^_`|~";
    const bool token = !v->empty() && std::all_of(v->begin(), v->end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) ||
             kTokenExtra.find(c) != std::string_view::npos;
    });
    if (!token) {
      error(n, "inject.hmac." + key + " '" + *v + "' is not a valid HTTP header name");
      return {};
    }
    for (auto r : kReserved)
      if (strcasecmpEq(*v, r)) {
        error(n, "inject.hmac." + key + " '" + *v + "' cannot be set (framing or hop-by-hop)");
        return {};
      }
    return *v;
  }

  // The template: every ${...} must be one of kHmacVariables; ${timestamp} needs the header
  // that tells the upstream which time was signed.
  void parseMessage(const YAML::Node& m, const YAML::Node& parent, HmacSigning& h) {
    if (!m) return error(parent, "inject.hmac needs 'message' (a template, e.g. \"${body}\")");
    auto v = text(m, "inject.hmac.message");
    if (!v) return;
    bool uses_timestamp = false;
    for (std::size_t i = v->find("${"); i != std::string::npos; i = v->find("${", i + 2)) {
      const auto close = v->find('}', i);
      const std::string var = close == std::string::npos ? "" : v->substr(i + 2, close - i - 2);
      if (std::find(std::begin(kHmacVariables), std::end(kHmacVariables), var) ==
          std::end(kHmacVariables))
        return error(m, "inject.hmac.message: unknown variable '${" + var +
                            "}' (known: ${method} ${path} ${query} ${timestamp} "
                            "${body_sha256} ${body})");
      uses_timestamp = uses_timestamp || var == "timestamp";
      h.needs_body = h.needs_body || var == "body" || var == "body_sha256";
    }
    if (uses_timestamp && h.timestamp_header.empty())
      return error(m,
                   "inject.hmac.message names ${timestamp}: add 'timestamp_header' (the "
                   "header that tells the upstream which time was signed)");
    h.message = *v;
  }

  const InjectParseContext& ctx_;
  bool failed_ = false;
};

}  // namespace

std::optional<HmacSigning> parseInjectHmac(const YAML::Node& n, std::set<std::string>& names,
                                           const InjectParseContext& ctx) {
  return HmacParser(ctx).parse(n, names);
}

}  // namespace sluice::policy
