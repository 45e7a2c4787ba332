// `sluice mcp`: a Model Context Protocol tool server on stdio (JSON-RPC 2.0, one message per
// line), built on the serve library: one session sandbox per connection, the egress proxy, the
// audit store, approvals put to the user by elicitation. Contract: DESIGN.md "sluice mcp";
// user guide: docs/mcp.md; tools: schemas/mcp.tools.v1.json.
#pragma once

#include <cstddef>
#include <expected>
#include <memory>
#include <string>

#include "sluice/serve/server.hpp"

namespace sluice::serve {

struct McpOptions {
  /// policy_dir, audit_db, secrets, ca_dir, upstream_cas (listeners and tokens are unused).
  ServeOptions serve;
  /// The workflow every tool call of the connection runs under.
  std::string workflow;
  /// `--approve-with CMD`: answers approvals as for `sluice run` ("" = none).
  std::string approve_with;
  /// A longer line is answered with a parse error and skipped without being buffered.
  std::size_t max_line_bytes = 16u << 20;
  /// Tool calls waiting behind the running one; past this the server stops reading its input
  /// until one finishes (the client's writes then block: back-pressure, not memory).
  std::size_t max_queued_calls = 64;
  /// Responses waiting to be written; past this the reader waits for the client to read.
  std::size_t max_pending_output = 8u << 20;
};

class McpServer {
 public:
  /// Loads the policies, opens the audit store and starts the proxy; the error says what failed
  /// (a workflow not in the policy directory is one).
  static std::expected<std::unique_ptr<McpServer>, std::string> create(McpOptions options);
  virtual ~McpServer();
  /// Serves one connection: JSON-RPC lines from `in_fd`, answers to `out_fd`, until `in_fd`
  /// ends (calls already received are finished first) or stop() is called (the running call is
  /// stopped, queued ones dropped). Then ends the session with its summary receipt and flushes
  /// the audit store. Call once.
  virtual void serve(int in_fd, int out_fd) = 0;
  /// From any thread (e.g. the one that got SIGTERM): makes serve() wind up and return.
  virtual void stop() = 0;

 protected:
  McpServer() = default;
};

}  // namespace sluice::serve
