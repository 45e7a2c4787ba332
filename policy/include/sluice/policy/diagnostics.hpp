// Diagnostics: problems found while loading policy, each tied to FILE:LINE:COL.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sluice/base/error.hpp"

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
  /// FILE:LINE:COL, or FILE alone when the position is unknown.
  std::string where() const;
};

/// The error value of every loading API: every problem found in one pass. Policy's own rich
/// value (`sluice policy check` prints each); other components take toError().
struct LoadError {
  std::vector<Diagnostic> diagnostics;

  /// All diagnostics, one per line.
  std::string str() const;
  /// The error that crosses into other components: kInvalidArgument, `where` the first
  /// diagnostic's FILE:LINE:COL, `message` every diagnostic as str() prints them, without the
  /// last newline (each line carries its own position: print `message`, not text()).
  base::Error toError() const;
};

/// Levenshtein distance: how far a misspelt key or command is from a known one.
std::size_t editDistance(std::string_view a, std::string_view b);

/// The candidates nearest to `word` (several on a tie), within a distance that still reads as
/// a typo: at most 2, and at most a third of the candidate's length (at least 1). Empty when
/// none is that near.
std::vector<std::string> nearestNames(std::string_view word,
                                      const std::vector<std::string_view>& candidates);

}  // namespace sluice::policy
