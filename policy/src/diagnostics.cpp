// Formatting of load diagnostics as FILE:LINE:COL: message.
#include "sluice/policy/diagnostics.hpp"

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

}  // namespace sluice::policy
