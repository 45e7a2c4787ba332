// SigV4 checked and signed again in the request pipeline (aws_signing.hpp).
#include "aws_signing.hpp"

#include <chrono>

#include "injection.hpp"
#include "sigv4_chunks.hpp"

namespace sluice::proxy {
namespace {

using policy::Reason;

sigv4::Request requestOf(const PmrFields& fields, std::string_view method,
                         std::string_view target) {
  sigv4::Request r{std::string(method), std::string(target), {}};
  for (const auto& f : fields) r.headers.emplace_back(f.name_string(), f.value());
  return r;
}

bool refuse(InjectionResult& inj, Reason reason, std::string detail) {
  inj.error = std::move(detail);
  inj.error_reason = reason;
  return false;
}

// The chunk signatures of a streaming upload, checked and replaced as the body streams.
class ChunkTransform : public BodyTransform {
 public:
  ChunkTransform(sigv4::ChunkChain placeholder, sigv4::ChunkChain real)
      : resigner_(std::move(placeholder), std::move(real)) {}

  std::optional<std::string_view> apply(std::string_view in, bool last) override {
    out_.clear();
    if (!resigner_.feed(in, out_)) return fail(resigner_.error());
    if (last && !resigner_.done())
      return fail("the upload ended before its last aws-chunked chunk");
    return std::string_view(out_);
  }

 private:
  std::nullopt_t fail(std::string why) {
    reason = Reason::kSignatureMismatch;
    detail = std::move(why);
    return std::nullopt;
  }

  sigv4::ChunkResigner resigner_;
  std::string out_;
};

}  // namespace

AwsSigning::AwsSigning(const policy::Rule* rule, const policy::SecretStore* secrets,
                       const std::vector<Placeholder>& placeholders)
    : secrets_(secrets) {
  if (!rule || !rule->inject.aws_sigv4) return;
  rule_ = rule;
  for (const auto& ph : placeholders) {
    if (ph.rule_id != rule->id || ph.swapped) continue;
    if (ph.env == "AWS_ACCESS_KEY_ID") id_ = &ph;
    if (ph.env == "AWS_SECRET_ACCESS_KEY") secret_ = &ph;
  }
}

bool AwsSigning::needsBodyHash(const policy::Rule* rule, const PmrFields& fields,
                               bool body_pending) {
  if (!rule || !rule->inject.aws_sigv4 || !body_pending) return false;
  if (fields.find("x-amz-content-sha256") != fields.end()) return false;
  auto authz = fields[http::field::authorization];
  return authz.starts_with("AWS4-HMAC-SHA256");
}

bool AwsSigning::verify(const PmrFields& fields, std::string_view method, std::string_view target,
                        std::optional<std::string_view> body_hash, InjectionResult& inj) {
  if (!rule_) return true;
  sigv4::Request req = requestOf(fields, method, target);
  if (!sigv4::isSigned(req)) return true;
  // A listener without a sandbox (standalone `sluice proxy`) has no placeholders to check
  // a signature against: signing it with the real key would sign whatever anyone sent.
  if (!id_ || !secret_)
    return refuse(inj, Reason::kSignatureMismatch,
                  "rule " + rule_->id + " re-signs SigV4 only for a sandbox's placeholder keys");
  auto v = sigv4::verify(req, {id_->token, secret_->token, {}}, body_hash);
  if (!v) {
    const bool mismatch = v.error().problem == sigv4::Problem::kSignatureMismatch ||
                          v.error().problem == sigv4::Problem::kWrongAccessKey;
    return refuse(inj, mismatch ? Reason::kSignatureMismatch : Reason::kInvalidRequest,
                  "SigV4: " + v.error().detail);
  }
  verified_ = std::move(*v);
  method_ = std::string(method);
  return true;
}

bool AwsSigning::resign(PmrFields& fields, std::string& target, InjectionResult& inj,
                        std::unique_ptr<BodyTransform>& transform) {
  if (!verified_) return true;
  const auto& names = *rule_->inject.aws_sigv4;
  std::optional<std::string_view> id, key, token;
  if (secrets_) {
    id = secrets_->find(names.access_key_id);
    key = secrets_->find(names.secret_access_key);
    token = names.session_token.empty() ? std::optional<std::string_view>(std::string_view())
                                        : secrets_->find(names.session_token);
  }
  if (!id || !key || !token)
    return refuse(inj, Reason::kSecretUnavailable,
                  "the secrets of rule " + rule_->id + "'s inject.aws_sigv4 are not in the store");
  auto r = sigv4::resign(requestOf(fields, method_, target), *verified_, {*id, *key, *token},
                         std::chrono::system_clock::now());
  if (!r) return refuse(inj, Reason::kInvalidRequest, "SigV4: " + r.error().detail);
  for (const auto& name : r->erase) fields.erase(name);
  for (auto& [name, value] : r->set) {
    fields.set(name, value);
    policy::wipeString(value);  // x-amz-security-token: the real session token
    inj.touched.push_back(name);
  }
  target = r->target;
  for (const auto& n : rule_->inject.secret_names)
    if (std::find(inj.secrets.begin(), inj.secrets.end(), n) == inj.secrets.end())
      inj.secrets.push_back(n);
  if (verified_->payload_hash == sigv4::kStreamingPayload)
    transform = std::make_unique<ChunkTransform>(sigv4::chainOf(*verified_, secret_->token),
                                                 sigv4::chainOf(r->auth, *key));
  return true;
}

}  // namespace sluice::proxy
