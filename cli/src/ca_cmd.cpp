// `sluice ca init --dir DIR`: a long-lived CA for standalone `sluice proxy --ca-dir DIR`.
#include <CLI/CLI.hpp>
#include <iostream>

#include "commands.hpp"
#include "sluice/policy/units.hpp"
#include "sluice/proxy/certificate_authority.hpp"

namespace sluice::cli {

void addCaCommands(CLI::App& app, int& exit_code) {
  auto* ca = app.add_subcommand("ca", "Certificate authority for TLS inspection");
  ca->require_subcommand(1);
  auto dir = std::make_shared<std::string>();
  auto validity = std::make_shared<std::string>("43800h");
  auto* init = ca->add_subcommand(
      "init", "Create DIR/ca.key (mode 0600) and DIR/ca.pem; never overwrites an existing CA");
  init->add_option("--dir", *dir, "Directory for the CA files")->required();
  init->add_option("--validity", *validity, "How long the CA certificate is valid (default 5y)");
  init->callback([&exit_code, dir, validity] {
    auto v = policy::parseDuration(*validity);
    if (!v) {
      std::cerr << "sluice ca init: --validity: " << v.error() << "\n";
      exit_code = 2;
      return;
    }
    auto r = proxy::CertificateAuthority::initDirectory(
        *dir, std::chrono::duration_cast<std::chrono::seconds>(*v));
    if (!r) {
      std::cerr << "sluice ca init: " << r.error() << "\n";
      exit_code = 1;
      return;
    }
    std::cout << "created " << *dir << "/ca.key (0600) and " << *dir
              << "/ca.pem; give clients ca.pem to trust, and run: sluice proxy --ca-dir " << *dir
              << " ...\n";
    exit_code = 0;
  });
}

}  // namespace sluice::cli
