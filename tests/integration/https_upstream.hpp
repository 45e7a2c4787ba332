// The HTTPS upstreams of the integration tests: a throwaway CA and a server certificate for
// localhost / 127.0.0.1 / ::1 signed by it, made with the openssl command line in `dir` (ca.pem,
// ca.key, server.pem, server.key; sluice trusts ca.pem with --upstream-ca), and a Python
// server started on them that writes its port to a file.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace sluice::testing {

/// "" on success, else the command that failed (its output is in dir/certs.log). `also` names
/// one more DNS name the server certificate is for ("" for none).
inline std::string makeUpstreamCertificates(const std::filesystem::path& dir,
                                            const std::string& also = "") {
  const std::string d = dir.string();
  std::ofstream(dir / "ext.cnf") << "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"
                                    "extendedKeyUsage=serverAuth\n"
                                    "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1"
                                 << (also.empty() ? "" : ",DNS:" + also) << "\n";
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

/// Starts `python3 SCRIPT ARGS...` (stdin and stdout /dev/null, stderr to dir/upstream.stderr)
/// and waits up to 10 s for `portfile` to appear. The child's pid (> 0; the caller stops it),
/// or -1 when it could not be started; `port` is the file's text once it appeared ("" if not).
inline pid_t startPythonUpstream(const std::filesystem::path& dir, std::vector<std::string> argv,
                                 const std::filesystem::path& portfile, std::string& port) {
  argv.insert(argv.begin(), "python3");
  const pid_t pid = ::fork();
  if (pid == 0) {
    int null = ::open("/dev/null", O_RDWR);
    int log = ::open((dir / "upstream.stderr").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(log, 2);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv("/usr/bin/python3", args.data());
    ::_exit(99);
  }
  if (pid < 0) return -1;
  for (int i = 0; i < 200 && !std::filesystem::exists(portfile); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::ifstream in(portfile);
  port.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return pid;
}

}  // namespace sluice::testing
