// `inject.aws_sigv4` in the request pipeline (Exchange::rewrite): the client's SigV4 signature,
// made with the sandbox's placeholder credentials, is checked on the request as sent; once the
// request is rewritten for the upstream it is signed again with the real credentials from the
// secret store (sigv4.hpp), and a streaming upload gets a body transform that signs its
// chunks again (sigv4_chunks.hpp). A request without a SigV4 signature passes unchanged.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "relay.hpp"
#include "sigv4.hpp"
#include "sluice/policy/matcher.hpp"
#include "sluice/policy/secrets.hpp"
#include "sluice/proxy/proxy.hpp"

namespace sluice::proxy {

struct InjectionResult;  // injection.hpp

class AwsSigning {
 public:
  /// For a request decided by `rule` (null, or a rule without aws_sigv4: does nothing).
  AwsSigning(const policy::Rule* rule, const policy::SecretStore* secrets,
             const std::vector<Placeholder>& placeholders);

  /// Whether the body must be read before the header can be checked: a request of `rule`
  /// signed over a body hash it does not state (no x-amz-content-sha256: services other
  /// than S3). The proxy reads such a body ahead, up to kMaxReadAhead bytes.
  static bool needsBodyHash(const policy::Rule* rule, const PmrFields& fields, bool body_pending);
  static constexpr std::size_t kMaxReadAhead = 8 << 20;

  /// Checks the signature of the request as the client sent it. `body_hash`: the body's hex
  /// SHA-256 when known (read ahead, or the empty string's when no body follows). On a
  /// refusal, fills `inj.error` and `inj.error_reason` and returns false.
  bool verify(const PmrFields& fields, std::string_view method, std::string_view target,
              std::optional<std::string_view> body_hash, InjectionResult& inj);

  /// Signs the request again as it will be forwarded: sets the header fields (and target, for a
  /// presigned URL), names the secrets in `inj`. A streaming upload's body transform is left in
  /// `transform`. False (with `inj.error`) when a secret is missing.
  bool resign(PmrFields& fields, std::string& target, InjectionResult& inj,
              std::unique_ptr<BodyTransform>& transform);

 private:
  const policy::Rule* rule_ = nullptr;
  const policy::SecretStore* secrets_ = nullptr;
  const Placeholder* id_ = nullptr;      // the AWS_ACCESS_KEY_ID stand-in
  const Placeholder* secret_ = nullptr;  // the AWS_SECRET_ACCESS_KEY stand-in
  std::optional<sigv4::Auth> verified_;
  std::string method_;
};

}  // namespace sluice::proxy
