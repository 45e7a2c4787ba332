// `sluice approvals list|allow ID|deny ID`: an approver's client of a running `sluice serve`
// (GET /v1/approvals, POST /v1/approvals/{id}) over its Unix socket or over TCP with a bearer
// token. Exit 0 done, 1 refused by the server (its error is printed), 2 cannot reach it.
#include <CLI/CLI.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.hpp"

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

struct Reply {
  unsigned status = 0;
  std::string body;
};

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

// One request to the server named by --connect: unix:PATH, or http://HOST:PORT.
std::expected<Reply, std::string> call(const ApprovalsOptions& o, http::verb method,
                                       const std::string& target, const std::string& body) {
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, "sluice");
  req.set(http::field::accept, "application/json");
  std::string token = o.token;
  if (token.empty())
    if (const char* t = std::getenv("SLUICE_TOKEN")) token = t;
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  net::io_context ioc;
  boost::system::error_code ec;
  if (o.connect.rfind("unix:", 0) == 0) {
    net::local::stream_protocol::socket s(ioc);
    s.connect(net::local::stream_protocol::endpoint(o.connect.substr(5)), ec);
    if (ec) return std::unexpected("cannot connect to " + o.connect + ": " + ec.message());
    return exchange(s, req);
  }
  std::string rest = o.connect;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  if (auto slash = rest.find('/'); slash != std::string::npos) rest.resize(slash);
  auto colon = rest.rfind(':');
  if (colon == std::string::npos || rest.empty())
    return std::unexpected("--connect '" + o.connect + "': expected unix:PATH or http://HOST:PORT");
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
  if (ec) return std::unexpected("cannot connect to " + o.connect + ": " + ec.message());
  return exchange(s, req);
}

// The server's error, or the answer parsed.
std::expected<json, int> answer(const std::expected<Reply, std::string>& r) {
  if (!r) {
    std::cerr << "sluice approvals: " << r.error() << "\n";
    return std::unexpected(2);
  }
  json j = json::parse(r->body, nullptr, false);
  if (r->status != 200) {
    std::cerr << "sluice approvals: " << r->status << " ";
    if (!j.is_discarded() && j.is_object() && j.contains("error"))
      std::cerr << j.value("reason", "") << ": " << j["error"].get<std::string>() << "\n";
    else
      std::cerr << r->body << "\n";
    return std::unexpected(1);
  }
  if (j.is_discarded()) {
    std::cerr << "sluice approvals: the server's answer is not JSON\n";
    return std::unexpected(2);
  }
  return j;
}

std::string text(const json& v) { return v.is_string() ? v.get<std::string>() : "-"; }

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
  for (const auto& a : *j) {
    std::cout << text(a["id"]) << "  " << text(a["workflow"]) << "  caller " << text(a["caller"])
              << "  rule " << text(a["rule"]) << "  ";
    if (a["method"].is_string())
      std::cout << text(a["method"]) << " " << text(a["host"]) << ":" << a["port"]
                << text(a["path"]);
    else
      std::cout << "CONNECT " << text(a["host"]) << ":" << a["port"];
    std::cout << "  execution " << text(a["execution_id"]) << "  expires " << text(a["expires_at"])
              << "\n";
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
    std::cout << decision << " " << o.id << " (" << text((*j)["host"]) << ":" << (*j)["port"]
              << ", scope " << o.scope << ")\n";
  return 0;
}

}  // namespace

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
    c->add_option("--scope", o->scope, "once (default) or execution: remember for the execution")
        ->check(CLI::IsMember({"once", "execution"}));
    c->callback([o, &exit_code, d] { exit_code = runDecide(*o, d); });
  }
}

}  // namespace sluice::cli
