// The seccomp filter compiled at build time (tools/seccomp_gen.cpp); see seccomp.hpp.
#include "seccomp.hpp"

namespace sluice::runner::detail {

const std::vector<sock_filter>& precompiledSeccompProgram() {
  static const std::vector<sock_filter> kProgram = {
#include "seccomp_program.inc"
  };
  return kProgram;
}

}  // namespace sluice::runner::detail
