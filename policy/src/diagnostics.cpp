// Formatting of load diagnostics as FILE:LINE:COL: message.
#include "sluice/policy/diagnostics.hpp"

namespace sluice::policy {

std::string Diagnostic::str() const {
  std::string out = file;
  if (pos.line > 0) {
    out += ':' + std::to_string(pos.line) + ':' + std::to_string(pos.column);
  }
  out += ": ";
  out += message;
  return out;
}

std::string LoadError::str() const {
  std::string out;
  for (const auto& d : diagnostics) {
    out += d.str();
    out += '\n';
  }
  return out;
}

}  // namespace sluice::policy
