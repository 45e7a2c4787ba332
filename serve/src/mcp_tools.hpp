// The tools of `sluice mcp` (DESIGN.md "sluice mcp", docs/mcp.md): run_command, write_file,
// read_file, list_files and explain_egress over one session of the serve library (one sandbox
// per MCP connection). Their definitions are schemas/mcp.tools.v1.json, compiled in; each call
// returns an MCP CallToolResult: text for the model, the receipt (or file info, or the policy's
// explanation) as structuredContent, and `isError: true` for a call that failed.
#pragma once

#include <expected>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "auth.hpp"
#include "engine.hpp"
#include "sessions.hpp"
#include "sluice/policy/matcher.hpp"

namespace sluice::serve {

/// schemas/mcp.tools.v1.json's text (generated: mcp_tools_json.cpp) and the version reported.
extern const char* const kMcpToolsJson;
extern const char* const kSluiceVersion;

class McpTools {
 public:
  /// `workflow` must be served by `engine` (checked by the caller).
  McpTools(Engine& engine, SessionManager& sessions, std::string workflow, Caller caller);

  /// The published tools: the `tools` array of tools/list.
  static const nlohmann::json& definitions();
  /// What tools/list answers for this connection's workflow: the published tools, with
  /// run_command's description saying so when the sandbox has no network (a model otherwise
  /// retries a download that cannot work).
  nlohmann::json listed() const;

  /// Checks a call before it runs: the tool exists and `args` match its inputSchema (and, for
  /// run_command, exactly one of command and argv). The error is the JSON-RPC -32602 message.
  static std::expected<void, std::string> validate(const std::string& name,
                                                   const nlohmann::json& args);

  /// Opens this connection's session sandbox (once; later calls return the same id or error).
  std::expected<std::string, std::string> open();

  /// Runs a validated call; `stop_fd`, when readable, stops a running command.
  nlohmann::json call(const std::string& name, const nlohmann::json& args, int stop_fd);

  /// Ends the session with its summary receipt in the audit store; `ended_by` "client" (the
  /// client closed the connection) or "shutdown" (SIGTERM).
  void close(const std::string& ended_by);

 private:
  nlohmann::json runCommand(const nlohmann::json& args, int stop_fd);
  nlohmann::json writeFile(const nlohmann::json& args);
  nlohmann::json readFile(const nlohmann::json& args);
  nlohmann::json listFiles(const nlohmann::json& args);
  nlohmann::json explainEgress(const nlohmann::json& args);

  Engine& engine_;
  SessionManager& sessions_;
  std::string workflow_;
  Caller caller_;
  std::shared_ptr<const policy::Matcher> matcher_;
  std::mutex mu_;
  bool opened_ = false;
  std::string session_id_;
  std::string open_error_;
};

}  // namespace sluice::serve
