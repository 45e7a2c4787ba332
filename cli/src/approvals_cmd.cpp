// `sluice approvals list|allow ID|deny ID [--scope once|execution|host]`: an approver's client of a
// running `sluice serve` (GET /v1/approvals, POST /v1/approvals/{id}) over its Unix socket or over
// TCP with a bearer token. Exit 0 done, 1 refused by the server (its error is printed), 2 cannot
// reach it.
#include <sys/ioctl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"
#include "sluice/base/net.hpp"
#include "sluice/base/strict_json.hpp"
#include "sluice/proxy/approvals.hpp"

namespace sluice::cli {

namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using nlohmann::json;

struct ApprovalsOptions {
  std::string connect = "unix:/run/sluice/sluice.sock";
  std::string token;  // --token, else $SLUICE_TOKEN
  std::string id;
  std::string scope = "once";
  bool json = false;
};

using Reply = ServeReply;

template <typename Stream>
std::expected<Reply, std::string> exchange(Stream& s, http::request<http::string_body>& req) {
  boost::system::error_code ec;
  http::write(s, req, ec);
  if (ec) return std::unexpected("cannot send the request: " + ec.message());
  boost::beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  http::read(s, buf, parser, ec);
  if (ec) return std::unexpected("cannot read the answer: " + ec.message());
  return Reply{parser.get().result_int(), parser.get().body()};
}

// One request to the server named by --connect (callServe).
std::expected<Reply, std::string> call(const ApprovalsOptions& o, http::verb method,
                                       const std::string& target, const std::string& body) {
  return callServe(o.connect, o.token, std::string(http::to_string(method)), target,
                   "application/json", body);
}

std::string text(const json& v) { return v.is_string() ? v.get<std::string>() : "-"; }

// The table's widths: anything the sandboxed code chose (host, path) or that may be long is
// escaped (proxy::displayText) and cut with "..." so that each approval is a few bounded
// lines (and on a terminal, every line is also cut to its width); --json has every value whole.
constexpr std::size_t kHostWidth = 64;
constexpr std::size_t kPathWidth = 64;
constexpr std::size_t kNameWidth = 40;
constexpr std::size_t kCoversWidth = 120;

// The member `key` of `obj` (null when absent or `obj` is no object: a const json's [] must not
// be asked for what is missing).
const json& field(const json& obj, const char* key) {
  static const json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

// One field as the table shows it.
std::string cell(const json& obj, const char* key, std::size_t width) {
  return proxy::displayText(text(field(obj, key)), width);
}

// The server's error, or the answer parsed.
std::expected<json, int> answer(const std::expected<Reply, std::string>& r) {
  if (!r) {
    std::cerr << "sluice approvals: " << r.error() << "\n";
    return std::unexpected(2);
  }
  // Strict, as every JSON sluice reads from outside: a key named twice is not an answer.
  auto j = base::parseStrictJson(r->body);
  if (r->status != 200) {
    std::cerr << "sluice approvals: " << r->status << " ";
    if (j && field(*j, "error").is_string())
      std::cerr << cell(*j, "reason", kNameWidth) << ": " << cell(*j, "error", 1000) << "\n";
    else
      std::cerr << proxy::displayText(r->body, 1000) << "\n";
    return std::unexpected(1);
  }
  if (!j) {
    std::cerr << "sluice approvals: the server's answer is not JSON ("
              << proxy::displayText(j.error().describe(), 1000) << ")\n";
    return std::unexpected(2);
  }
  return std::move(*j);
}

// The terminal's width when stdout is one (0 otherwise): every line of the table is cut to it,
// so nothing wraps, whatever the field widths add up to.
std::size_t terminalWidth() {
  winsize ws{};
  if (::isatty(STDOUT_FILENO) != 1 || ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0) return 0;
  return ws.ws_col;
}

// One line of the table (already escaped: printable ASCII only, one byte a column), cut to
// `width` with "..." (0: as is).
void printLine(const std::string& line, std::size_t width) {
  if (width == 0 || line.size() <= width)
    std::cout << line << "\n";
  else
    std::cout << line.substr(0, width < 3 ? 0 : width - 3) << "...\n";
}

void printApproval(const json& a, std::size_t width) {
  const std::string target = cell(a, "host", kHostWidth) + ":" + field(a, "port").dump();
  const std::string request =
      field(a, "method").is_string()
          ? cell(a, "method", 16) + " " + target + cell(a, "path", kPathWidth)
          : "CONNECT " + target;
  printLine(cell(a, "id", kNameWidth) + "  " + request, width);
  printLine("    rule " + cell(a, "rule", kNameWidth) + "  workflow " +
                cell(a, "workflow", kNameWidth) + "  caller " + cell(a, "caller", kNameWidth),
            width);
  printLine("    execution " + cell(a, "execution_id", kNameWidth) + "  expires " +
                cell(a, "expires_at", kNameWidth),
            width);
  // What each scope's answer would cover, as the server worded it.
  for (const char* scope : {"once", "execution", "host"})
    if (field(field(a, "covers"), scope).is_string())
      printLine("    --scope " + std::string(scope) + std::string(10 - std::strlen(scope), ' ') +
                    cell(field(a, "covers"), scope, kCoversWidth),
                width);
}

int runList(const ApprovalsOptions& o) {
  auto j = answer(call(o, http::verb::get, "/v1/approvals", ""));
  if (!j) return j.error();
  if (o.json) {
    std::cout << j->dump() << "\n";
    return 0;
  }
  if (j->empty()) {
    std::cout << "no pending approvals\n";
    return 0;
  }
  if (!j->is_array()) {
    std::cerr << "sluice approvals: the server's answer is not a list\n";
    return 2;
  }
  const std::size_t width = terminalWidth();
  for (const auto& a : *j) {
    if (a.is_object()) printApproval(a, width);
  }
  return 0;
}

int runDecide(const ApprovalsOptions& o, const char* decision) {
  json body = {{"decision", decision}, {"scope", o.scope}};
  auto j = answer(call(o, http::verb::post, "/v1/approvals/" + o.id, body.dump()));
  if (!j) return j.error();
  if (o.json)
    std::cout << j->dump() << "\n";
  else
    std::cout << decision << " " << proxy::displayText(o.id, kNameWidth) << " ("
              << cell(*j, "host", kHostWidth) << ":" << field(*j, "port").dump() << ", scope "
              << o.scope << ": " << cell(field(*j, "covers"), o.scope.c_str(), kCoversWidth)
              << ")\n";
  return 0;
}

}  // namespace

std::expected<ServeReply, std::string> callServe(
    const std::string& connect, const std::string& token_given, const std::string& method,
    const std::string& target, const std::string& content_type, const std::string& body) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, "sluice");
  req.set(http::field::accept, "application/json");
  std::string token = token_given;
  if (token.empty())
    if (const char* t = std::getenv("SLUICE_TOKEN")) token = t;
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  if (!body.empty()) {
    req.set(http::field::content_type, content_type);
    req.body() = body;
  }
  req.prepare_payload();
  net::io_context ioc;
  boost::system::error_code ec;
  if (connect.rfind("unix:", 0) == 0) {
    net::local::stream_protocol::socket s(ioc);
    s.connect(net::local::stream_protocol::endpoint(connect.substr(5)), ec);
    if (ec) return std::unexpected("cannot connect to " + connect + ": " + ec.message());
    return exchange(s, req);
  }
  std::string rest = connect;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  if (auto slash = rest.find('/'); slash != std::string::npos) rest.resize(slash);
  auto colon = rest.rfind(':');
  if (colon == std::string::npos || rest.empty())
    return std::unexpected("--connect '" + connect + "': expected unix:PATH or http://HOST:PORT");
  std::string host = rest.substr(0, colon), port = rest.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (token.empty())
    return std::unexpected("a TCP listener needs a token: --token T or SLUICE_TOKEN");
  net::ip::tcp::resolver resolver(ioc);
  auto eps = resolver.resolve(host, port, ec);
  if (ec) return std::unexpected("cannot resolve " + host + ": " + ec.message());
  net::ip::tcp::socket s(ioc);
  net::connect(s, eps, ec);
  if (ec) return std::unexpected("cannot connect to " + connect + ": " + ec.message());
  return exchange(s, req);
}

void addApprovalsCommands(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ApprovalsOptions>();
  auto* cmd = app.add_subcommand(
      "approvals", "List and answer pending approvals of a running sluice serve (approvers only)");
  cmd->require_subcommand(1);
  auto common = [o](CLI::App* c) {
    c->add_option("--connect", o->connect,
                  "unix:PATH (default unix:/run/sluice/sluice.sock) or http://HOST:PORT");
    c->add_option("--token", o->token, "Bearer token for a TCP listener (or $SLUICE_TOKEN)");
    c->add_flag("--json", o->json, "Print the server's JSON");
  };
  auto* list = cmd->add_subcommand("list", "Pending approvals, oldest first");
  common(list);
  list->callback([o, &exit_code] { exit_code = runList(*o); });
  for (const char* d : {"allow", "deny"}) {
    auto* c = cmd->add_subcommand(d, std::string(d) + " a pending approval");
    common(c);
    c->add_option("id", o->id, "The approval's id")->required();
    c->add_option("--scope", o->scope,
                  "once (default); execution: later requests of the same method (a tunnel: the "
                  "host and port) for the execution; host: every method to that host and port")
        ->check(CLI::IsMember({"once", "execution", "host"}));
    c->callback([o, &exit_code, d] { exit_code = runDecide(*o, d); });
  }
}

}  // namespace sluice::cli
