// Formatting of load diagnostics as FILE:LINE:COL: message.
#include "sluice/policy/diagnostics.hpp"

#include <algorithm>

namespace sluice::policy {

std::string Diagnostic::where() const {
  std::string out = file;
  if (pos.line > 0) {
    out += ':' + std::to_string(pos.line) + ':' + std::to_string(pos.column);
  }
  return out;
}

std::string Diagnostic::str() const { return where() + ": " + message; }

std::string LoadError::str() const {
  std::string out;
  for (const auto& d : diagnostics) {
    out += d.str();
    out += '\n';
  }
  return out;
}

base::Error LoadError::toError() const {
  std::string message = str();
  if (!message.empty()) message.pop_back();  // the last '\n'
  return base::Error{base::Code::kInvalidArgument, std::move(message),
                     diagnostics.empty() ? std::string() : diagnostics.front().where()};
}

std::size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> nearestNames(std::string_view word,
                                      const std::vector<std::string_view>& candidates) {
  std::vector<std::string> best;
  std::size_t best_d = 3;
  for (auto c : candidates) {
    const std::size_t d = editDistance(word, c);
    if (d > std::max<std::size_t>(1, c.size() / 3) || d > best_d) continue;
    if (d < best_d) best.clear();
    best_d = d;
    best.emplace_back(c);
  }
  return best;
}

}  // namespace sluice::policy
