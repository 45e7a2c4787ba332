// A throwaway CA and a server certificate for localhost / 127.0.0.1 / ::1 signed by it, made
// with the openssl command line in `dir`: ca.pem, ca.key, server.pem, server.key (the upstreams
// of the integration tests serve server.pem; sluice trusts ca.pem with --upstream-ca).
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace sluice::testing {

/// "" on success, else the command that failed (its output is in dir/certs.log).
inline std::string makeUpstreamCertificates(const std::filesystem::path& dir) {
  const std::string d = dir.string();
  std::ofstream(dir / "ext.cnf") << "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                                    "extendedKeyUsage=serverAuth\n"
                                    "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\n";
  const std::string steps[] = {
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + d +
          "/ca.key -out " + d +
          "/ca.pem -days 2 -subj '/CN=sluice test upstream CA' "
          "-addext basicConstraints=critical,CA:TRUE "
          "-addext keyUsage=critical,keyCertSign,cRLSign",
      "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + d +
          "/server.key -out " + d + "/server.csr -subj /CN=localhost",
      "openssl x509 -req -in " + d + "/server.csr -CA " + d + "/ca.pem -CAkey " + d +
          "/ca.key -CAcreateserial -out " + d + "/server.pem -days 2 -extfile " + d + "/ext.cnf"};
  for (const auto& cmd : steps)
    if (std::system(("(" + cmd + ") >>" + d + "/certs.log 2>&1").c_str()) != 0) return cmd;
  return "";
}

}  // namespace sluice::testing
