// The whole-request-body stage's plain functions (request_body.hpp).
#include "request_body.hpp"

namespace sluice::proxy {

WholeBody wholeBodyNeed(const ReqParser& p, BodyNeeds needs, std::size_t bound) {
  if (p.is_done() || !(needs.swaps || needs.signs || needs.scans)) return WholeBody::kStream;
  if (auto length = p.content_length()) {
    if (*length <= bound) return WholeBody::kRead;
    return needs.signs ? WholeBody::kTooLarge : WholeBody::kStream;
  }
  return needs.swaps || needs.signs ? WholeBody::kRead : WholeBody::kStream;
}

void dropTrailers(PmrFields& fields, std::size_t count) {
  auto it = fields.begin();
  for (std::size_t i = 0; i < count && it != fields.end(); ++i) ++it;
  while (it != fields.end()) it = fields.erase(it);
}

void setWholeBodyFraming(http::request_header<PmrFields>& req, std::size_t size) {
  req.erase(http::field::transfer_encoding);
  req.set(http::field::content_length, std::to_string(size));
}

}  // namespace sluice::proxy
