// `inject.aws_sigv4` parsing and validation (inject_aws_sigv4.hpp).
#include "inject_aws_sigv4.hpp"

#include <algorithm>

namespace sluice::policy {
namespace {

// One credential: a string that is exactly one `${secret:NAME}` (a signing key is a secret
// as a whole, never text around one). Returns the name, or "" after reporting the problem.
std::string secretName(const YAML::Node& v, std::string_view key, std::set<std::string>& names,
                       const InjectParseContext& ctx) {
  const std::string what = "inject.aws_sigv4." + std::string(key);
  if (!v.IsScalar()) {
    ctx.error(v, what + " must be a string");
    return {};
  }
  const std::string& text = v.Scalar();
  std::set<std::string> found;
  ctx.secret_template(v, text, found);
  if (found.size() != 1 || text != "${secret:" + *found.begin() + "}") {
    ctx.error(v, what + " must be exactly one ${secret:NAME} (got '" + text + "')");
    return {};
  }
  names.insert(*found.begin());
  return *found.begin();
}

}  // namespace

void parseInjectAwsSigv4(const YAML::Node& n, Inject& inject, std::set<std::string>& names,
                         const InjectParseContext& ctx) {
  if (!ctx.check_map(n, "inject.aws_sigv4",
                     {"access_key_id", "secret_access_key", "session_token"})) {
    return;
  }
  AwsSigV4 a;
  a.pos = {n.Mark().line + 1, n.Mark().column + 1};
  bool ok = true;
  for (std::string_view key : {"access_key_id", "secret_access_key"}) {
    if (!n[std::string(key)]) {
      ctx.error(n, "inject.aws_sigv4 needs '" + std::string(key) + "'");
      ok = false;
    }
  }
  if (!ok) return;
  a.access_key_id = secretName(n["access_key_id"], "access_key_id", names, ctx);
  a.secret_access_key = secretName(n["secret_access_key"], "secret_access_key", names, ctx);
  if (auto t = n["session_token"]) a.session_token = secretName(t, "session_token", names, ctx);
  if (a.access_key_id.empty() || a.secret_access_key.empty()) return;
  if (!inject.placeholder_env.empty()) {
    ctx.error(n,
              "inject.aws_sigv4 cannot be combined with inject.placeholder_env on one rule (it "
              "sets its own placeholders: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)");
    return;
  }
  inject.aws_sigv4 = std::move(a);
}

void checkAwsSigv4Rules(const std::vector<Rule>& rules, const InjectParseContext& ctx) {
  const Rule* first = nullptr;
  for (const Rule& r : rules) {
    if (!r.inject.aws_sigv4) continue;
    if (first) {
      ctx.error_at(r.inject.aws_sigv4->pos,
                   "rule '" + r.id + "': only one rule may have inject.aws_sigv4 (rule '" +
                       first->id +
                       "' has it; the sandbox has one AWS_ACCESS_KEY_ID): list every host "
                       "in that rule");
    } else {
      first = &r;
    }
  }
  if (!first) return;
  for (const Rule& r : rules) {
    const auto& env = r.inject.placeholder_env;
    if (std::find(std::begin(kAwsSigv4Env), std::end(kAwsSigv4Env), env) != std::end(kAwsSigv4Env))
      ctx.error_at(r.pos, "rule '" + r.id + "': inject.placeholder_env " + env +
                              " is set by rule '" + first->id + "' (inject.aws_sigv4)");
  }
}

}  // namespace sluice::policy
