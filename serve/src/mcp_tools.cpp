// The MCP tools over one session (mcp_tools.hpp).
#include "mcp_tools.hpp"

#include <openssl/evp.h>

#include <cmath>

#include "mcp_schema.hpp"
#include "sluice/base/digest.hpp"
#include "sluice/policy/explain.hpp"
#include "sluice/policy/explain_json.hpp"
#include "sluice/policy/units.hpp"

namespace sluice::serve {
using nlohmann::json;
namespace pol = sluice::policy;

namespace {

json textContent(const std::string& text) {
  return json::array({json{{"type", "text"}, {"text", text}}});
}

json success(const std::string& text, json structured) {
  return json{{"content", textContent(text)},
              {"structuredContent", std::move(structured)},
              {"isError", false}};
}

json failure(const std::string& text) {
  return json{{"content", textContent(text)}, {"isError", true}};
}

json failure(const base::Error& e) { return failure(e.text()); }

// A file error, naming the path once (the session's own messages usually name it already).
json failure(const std::string& path, const base::Error& e) {
  const std::string text = e.text();
  return failure(text.find(path) != std::string::npos ? text : path + ": " + text);
}

// The sandbox path of a tool's `path`: absolute as given, relative under /work.
std::string sandboxPath(const std::string& path) {
  return path.starts_with('/') ? path : "/work/" + path;
}

// SessionManager takes the URL form of a path (no leading slash, %XX decoded): a literal '%'
// must travel as %25 so that the file the model named is the one touched.
std::string urlPath(const std::string& sandbox_path) {
  std::string out;
  for (char c : sandbox_path.substr(1)) out += c == '%' ? std::string("%25") : std::string(1, c);
  return out;
}

std::string base64(const std::string& data) {
  std::string out(4 * ((data.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(data.data()),
                          static_cast<int>(data.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF): such bytes can be
// a JSON string as they are; anything else goes out as base64.
bool isUtf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  for (std::size_t i = 0; i < n;) {
    unsigned c = p[i];
    std::size_t len = c < 0x80         ? 1
                      : (c >> 5) == 6  ? 2
                      : (c >> 4) == 14 ? 3
                      : (c >> 3) == 30 ? 4
                                       : 0;
    if (len == 0 || i + len > n) return false;
    std::uint32_t cp = len == 1 ? c : c & (0xFF >> (len + 1));
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static const std::uint32_t min_for_len[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_for_len[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// What the model reads of a receipt: how it ended, its output, its network refusals.
// run_command's `timeout`: seconds (a number), or a duration string ("90s", "1500ms").
std::expected<std::chrono::milliseconds, std::string> timeoutArgument(const json& t) {
  if (t.is_number()) {
    const double seconds = t.get<double>();
    if (!(seconds > 0) || !std::isfinite(seconds) || seconds > 1e9)
      return std::unexpected(std::string("timeout: must be a positive number of seconds"));
    return std::chrono::milliseconds(std::max<long long>(1, std::llround(seconds * 1000)));
  }
  if (!t.is_string()) return std::unexpected(std::string("timeout: must be a string"));
  auto d = pol::parseDuration(t.get<std::string>());
  if (!d) return std::unexpected("timeout: " + d.error());
  if (d->count() <= 0) return std::unexpected(std::string("timeout: must be positive"));
  return *d;
}

std::string receiptText(const json& r) {
  std::string out;
  const json& exit = r["exit"];
  if (exit.value("signal", json()).is_number())
    out += "killed by signal " + exit["signal"].dump();
  else
    out += "exit code " + exit.value("code", json(0)).dump();
  if (r.value("limit_hit", json()).is_string())
    out += " (stopped by the " + r["limit_hit"].get<std::string>() + " limit)";
  out += "\n";
  for (const char* stream : {"stdout", "stderr"}) {
    const json& s = r.value(stream, json::object());
    const std::string text = s.value("text", "");
    if (text.empty()) continue;
    out += std::string(stream) + (s.value("truncated", false) ? " (truncated):\n" : ":\n") + text;
    if (!text.ends_with('\n')) out += "\n";
  }
  const json& net = r.value("network", json::object());
  auto where = [](const json& d) {
    return (d.contains("method") ? d.value("method", "") + " " : std::string()) +
           d.value("host", "") + ":" + d.value("port", json(0)).dump() + d.value("path", "");
  };
  for (const auto& d : net.value("denials", json::array()))
    out += "network refused: " + where(d) + " (" + d.value("reason", "") +
           (d.value("rule", json()).is_string() ? ", rule " + d["rule"].get<std::string>() : "") +
           ")\n";
  for (const auto& f : net.value("failures", json::array()))
    out +=
        "network failed: " + where(f) + " (" + f.value("reason", "") + "; allowed by the policy)\n";
  out += "execution " + r.value("execution_id", "") + " (receipt in structuredContent)";
  return out;
}

}  // namespace

// Appended to run_command's description under `network: none`.
constexpr const char* kNoNetworkNote =
    " This workflow's sandbox has no network: every connection fails at once (no proxy, no "
    "DNS), so do not try to download or install anything; use the files you write.";

McpTools::McpTools(Engine& engine, SessionManager& sessions, std::string workflow, Caller caller)
    : engine_(engine),
      sessions_(sessions),
      workflow_(std::move(workflow)),
      caller_(std::move(caller)),
      matcher_(pol::Matcher::compile(engine.workflow(workflow_))) {}

const json& McpTools::definitions() {
  static const json tools = json::parse(kMcpToolsJson)["tools"];
  return tools;
}

json McpTools::listed() const {
  json tools = definitions();
  const auto w = engine_.workflow(workflow_);
  if (!w || w->sandbox.network != pol::NetworkMode::kNone) return tools;
  for (json& tool : tools)
    if (tool["name"] == "run_command")
      tool["description"] = tool["description"].get<std::string>() + kNoNetworkNote;
  return tools;
}

std::expected<void, std::string> McpTools::validate(const std::string& name, const json& args) {
  for (const auto& tool : definitions()) {
    if (tool["name"] != name) continue;
    if (auto r = checkJsonSchema(tool["inputSchema"], args, "arguments"); !r) return r;
    if (name == "run_command" && args.contains("command") == args.contains("argv"))
      return std::unexpected(std::string("arguments: give exactly one of 'command' and 'argv'"));
    return {};
  }
  return std::unexpected("unknown tool '" + name +
                         "' (tools: run_command, write_file, read_file, list_files, "
                         "explain_egress)");
}

std::expected<std::string, std::string> McpTools::open() {
  std::lock_guard lock(mu_);
  if (!opened_) {
    opened_ = true;
    SessionRequest request;
    request.workflow = workflow_;
    auto created = sessions_.create(caller_, request);
    if (created)
      session_id_ = (*created)["id"];
    else
      open_error_ = "the sandbox session could not start: " + created.error().text();
  }
  if (session_id_.empty()) return std::unexpected(open_error_);
  return session_id_;
}

json McpTools::call(const std::string& name, const json& args, int stop_fd) {
  if (name == "explain_egress") return explainEgress(args);
  if (auto id = open(); !id) return failure(id.error());
  if (name == "run_command") return runCommand(args, stop_fd);
  if (name == "write_file") return writeFile(args);
  if (name == "read_file") return readFile(args);
  if (name == "list_files") return listFiles(args);
  return failure("unknown tool '" + name + "'");
}

void McpTools::close(const std::string& ended_by) {
  std::lock_guard lock(mu_);
  if (session_id_.empty()) return;
  // The manager holds this connection's session only: ending all of them ends it.
  sessions_.endAll(ended_by);
  session_id_.clear();
}

json McpTools::runCommand(const json& args, int stop_fd) {
  sluice::execution::Command cmd;
  const json argv =
      args.contains("command") ? json::array({"/bin/sh", "-c", args["command"]}) : args["argv"];
  if (auto ok = parseCommandField("argv", argv, cmd); !ok) return failure(ok.error());
  if (args.contains("stdin"))
    if (auto ok = parseCommandField("stdin", args["stdin"], cmd); !ok) return failure(ok.error());
  if (args.contains("timeout")) {
    auto timeout = timeoutArgument(args["timeout"]);
    if (!timeout) return failure(timeout.error());
    cmd.limits.timeout = *timeout;
  }
  auto receipt = sessions_.exec(caller_, session_id_, cmd, nullptr, stop_fd);
  if (!receipt) return failure(receipt.error());
  return success(receiptText(*receipt), *receipt);
}

json McpTools::writeFile(const json& args) {
  const std::string path = sandboxPath(args["path"]);
  auto info = sessions_.putFile(caller_, session_id_, urlPath(path), args["content"]);
  if (!info) return failure(path, info.error());
  return success("wrote " + (*info)["bytes"].dump() + " bytes to " +
                     (*info)["path"].get<std::string>() + " (sha256 " +
                     (*info)["sha256"].get<std::string>() + ")",
                 *info);
}

json McpTools::readFile(const json& args) {
  const std::string path = sandboxPath(args["path"]);
  auto got = sessions_.getFile(caller_, session_id_, urlPath(path));
  if (!got) return failure(path, got.error());
  if (got->content_type == "application/json")
    return failure(path + ": is a directory (list it with list_files)");
  const bool text = isUtf8(got->body);
  json info = {{"path", path},
               {"bytes", got->body.size()},
               {"sha256", base::sha256Hex(got->body)},
               {"encoding", text ? "utf-8" : "base64"},
               {"content", text ? got->body : base64(got->body)}};
  std::string shown = text ? got->body
                           : "(" + std::to_string(got->body.size()) +
                                 " bytes that are not UTF-8 text; base64:)\n" +
                                 info["content"].get<std::string>();
  return success(shown, std::move(info));
}

json McpTools::listFiles(const json& args) {
  const std::string path = sandboxPath(args.value("path", "/work"));
  auto got = sessions_.getFile(caller_, session_id_, urlPath(path));
  if (!got) return failure(path, got.error());
  if (got->content_type != "application/json")
    return failure(path + ": is a file, not a directory (read it with read_file)");
  json entries = json::parse(got->body, nullptr, false);
  if (!entries.is_array()) return failure(path + ": the listing could not be read");
  std::string text = path + ":\n";
  for (const auto& e : entries)
    text += e["type"] == "directory"
                ? e["name"].get<std::string>() + "/\n"
                : e["name"].get<std::string>() + " (" + e["bytes"].dump() + " bytes)\n";
  if (entries.empty()) text += "(empty)\n";
  return success(text, json{{"path", path}, {"entries", entries}});
}

json McpTools::explainEgress(const json& args) {
  pol::ExplainQuery q;
  q.url = args["url"];
  q.method = args.value("method", "GET");
  auto ex = pol::explain(*matcher_, q);
  if (!ex) return failure("url: " + ex.error());
  json j = policy::explanationJson(*ex, workflow_);
  std::string text = j["decision"].get<std::string>() + ": " + ex->decision.detail;
  if (!ex->decision.rule_id.empty()) text += " (rule " + ex->decision.rule_id + ")";
  if (!ex->decision.nearest_miss.empty()) text += "\nnearest miss: " + ex->decision.nearest_miss;
  if (!ex->note.empty()) text += "\nnote: " + ex->note;
  return success(text, std::move(j));
}

}  // namespace sluice::serve
