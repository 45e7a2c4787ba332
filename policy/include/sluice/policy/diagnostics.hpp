// Diagnostics: problems found while loading policy, each tied to FILE:LINE:COL.
#pragma once

#include <string>
#include <vector>

namespace sluice::policy {

/// A position in a policy file; line and column are 1-based (0 = unknown).
struct SourcePos {
  int line = 0;
  int column = 0;
};

/// One problem in one file, printed as `FILE:LINE:COL: message`.
struct Diagnostic {
  std::string file;
  SourcePos pos;
  std::string message;

  std::string str() const;
};

/// The error value of every loading API: every problem found in one pass.
struct LoadError {
  std::vector<Diagnostic> diagnostics;

  /// All diagnostics, one per line.
  std::string str() const;
};

}  // namespace sluice::policy
