// `sluice mcp` driven by the official MCP TypeScript SDK client (@modelcontextprotocol/sdk,
// pinned in package-lock.json): connect over stdio, list tools, write a script, run it against
// an upstream this test starts on loopback, read its output, get a request refused by the
// policy, and answer two approvals (`action: ask`) by elicitation, yes then no; then check the
// receipts and approvals in the audit store with `sluice audit query`. The SDK itself validates
// every structuredContent against the tool's outputSchema (callTool throws otherwise).
//
// Usage: node sdk_client_test.mjs SLUICE_BINARY SOURCE_DIR
// Exit 0 passed, 1 failed, 77 skipped (no sandbox; a failure with CI=true or
// SLUICE_REQUIRE_ISOLATION=1).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ElicitRequestSchema, LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/sdk/types.js";

const [sluice] = process.argv.slice(2);

if (process.getuid() !== 0) {
  const required =
    process.env.CI === "true" || process.env.SLUICE_REQUIRE_ISOLATION === "1";
  console.log(required ? "FAIL: the sandbox needs root" : "SKIP: the sandbox needs root");
  process.exit(required ? 1 : 77);
}

// An upstream on 127.0.0.1 that says which server and path it served.
function upstream(name) {
  return new Promise((resolve) => {
    const server = http.createServer((req, res) => {
      res.writeHead(200, { "content-type": "text/plain" });
      res.end(`${name} served ${req.method} ${req.url}`);
    });
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}

const allowed = await upstream("allowed");
const other = await upstream("other");
const asked = await upstream("asked");
const port = (s) => s.address().port;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sluice-mcp-sdk-"));
fs.mkdirSync(path.join(dir, "policies"));
fs.writeFileSync(
  path.join(dir, "policies", "web.yaml"),
  `apiVersion: sluice/v1
kind: Workflow
name: mcp-web
description: the MCP SDK client test's upstreams on loopback
sandbox:
  timeout: 60s
  network: proxy
egress:
  rules:
    - id: upstream
      action: allow
      cidrs: ["127.0.0.1/32"]
      allow_private: true
      ports: [${port(allowed)}]
    - id: ask-upstream
      action: ask
      cidrs: ["127.0.0.1/32"]
      allow_private: true
      ports: [${port(asked)}]
      ask: {timeout: 30s}
`,
);
const db = path.join(dir, "audit.db");

const elicitations = [];
const answers = [true, false];
const client = new Client(
  { name: "sluice-sdk-test", version: "1.0.0" },
  { capabilities: { elicitation: {} } },
);
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  elicitations.push(request.params);
  return { action: "accept", content: { allow: answers.shift() } };
});
const transport = new StdioClientTransport({
  command: sluice,
  args: ["mcp", "--policy-dir", path.join(dir, "policies"), "--workflow", "mcp-web", "--audit", db],
  stderr: "inherit",
});

async function call(name, args) {
  const result = await client.callTool({ name, arguments: args });
  assert.equal(result.isError, false, `${name}: ${JSON.stringify(result)}`);
  assert.ok(result.structuredContent, `${name}: no structuredContent`);
  assert.equal(result.content[0].type, "text");
  return result;
}

const curl = (p, urlPath) =>
  `curl -s -w ' %{http_code}' http://127.0.0.1:${p}${urlPath}`;

try {
  await client.connect(transport);
  assert.equal(client.getServerVersion().name, "sluice");
  assert.deepEqual(client.getServerCapabilities().tools, { listChanged: false });
  // The SDK asked for its newest revision; sluice speaks it.
  console.log(`connected (client protocol ${LATEST_PROTOCOL_VERSION})`);

  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((t) => t.name).sort(), [
    "explain_egress",
    "list_files",
    "read_file",
    "run_command",
    "write_file",
  ]);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, "object", t.name);
    assert.equal(t.outputSchema.type, "object", t.name);
  }

  // Write a script, run it, read what it wrote.
  const written = await call("write_file", {
    path: "/work/fetch.sh",
    content: `${curl(port(allowed), "/hello")} > /output/out.txt\n`,
  });
  assert.equal(written.structuredContent.path, "/work/fetch.sh");
  const ran = await call("run_command", { command: "sh /work/fetch.sh" });
  const receipt = ran.structuredContent;
  assert.equal(receipt.exit.code, 0, JSON.stringify(receipt));
  assert.equal(receipt.network.allowed, 1, JSON.stringify(receipt.network));
  const session = receipt.session_id;
  const read = await call("read_file", { path: "/output/out.txt" });
  assert.equal(read.structuredContent.content, "allowed served GET /hello 200");
  assert.equal(read.content[0].text, "allowed served GET /hello 200");
  const listed = await call("list_files", { path: "/output" });
  assert.deepEqual(listed.structuredContent.entries.map((e) => e.name), ["out.txt"]);

  // A request the workflow does not allow: refused by the proxy, and the result says so.
  const explained = await call("explain_egress", { url: `http://127.0.0.1:${port(other)}/x` });
  assert.equal(explained.structuredContent.decision, "deny");
  const denied = await call("run_command", { command: curl(port(other), "/x") });
  // The proxy's 403 names the reason; so do the receipt and the text the model reads.
  assert.match(denied.structuredContent.stdout.text, /"reason":"port_not_allowed".* 403$/s);
  const denials = denied.structuredContent.network.denials;
  assert.ok(denials.length >= 1, JSON.stringify(denials));
  for (const d of denials) {
    assert.deepEqual([d.host, d.port, d.reason], ["127.0.0.1", port(other), "port_not_allowed"]);
  }
  assert.match(denied.content[0].text, /network refused: GET 127\.0\.0\.1:\d+\/x \(port_not_allowed/);

  // `action: ask`: the server asks the user by elicitation; yes, then no.
  const explainedAsk = await call("explain_egress", { url: `http://127.0.0.1:${port(asked)}/` });
  assert.equal(explainedAsk.structuredContent.decision, "ask");
  const yes = await call("run_command", { command: curl(port(asked), "/first") });
  assert.equal(yes.structuredContent.stdout.text, "asked served GET /first 200");
  const no = await call("run_command", { command: curl(port(asked), "/second") });
  assert.match(no.structuredContent.stdout.text, / 403$/);
  assert.equal(no.structuredContent.network.denials[0]?.reason, "approval_denied");
  assert.equal(elicitations.length, 2, JSON.stringify(elicitations));
  for (const [i, p] of ["/first", "/second"].entries()) {
    const e = elicitations[i];
    assert.ok(e.message.includes(`127.0.0.1:${port(asked)}`), e.message);
    assert.ok(e.message.includes(`GET ${p}`), e.message);
    assert.deepEqual(e.requestedSchema.required, ["allow"]);
    assert.equal(e.requestedSchema.properties.allow.type, "boolean");
  }

  // A tool error is a result, not an exception.
  const missing = await client.callTool({ name: "read_file", arguments: { path: "/work/nope" } });
  assert.equal(missing.isError, true);

  await client.close(); // closes stdin: the session ends with its receipt
  assert.equal(transport.pid ?? null, null);

  const query = (...args) =>
    JSON.parse(execFileSync(sluice, ["audit", "query", "--db", db, "--format", "json", ...args]));
  const executions = query("--kind", "executions");
  const ids = executions.map((e) => e.id);
  assert.ok(ids.includes(session), JSON.stringify(ids));
  assert.ok(ids.includes(receipt.execution_id), JSON.stringify(ids));
  // Each exec's connections and requests are recorded under that exec's id (not the session's).
  const refused = query("--execution", denied.structuredContent.execution_id, "--decision", "deny");
  assert.ok(
    refused.some((e) => e.port === port(other) && e.reason === "port_not_allowed"),
    JSON.stringify(refused),
  );
  const refusedAsk = query("--execution", no.structuredContent.execution_id, "--decision", "deny");
  assert.ok(
    refusedAsk.some((e) => e.path === "/second" && e.reason === "approval_denied"),
    JSON.stringify(refusedAsk),
  );
  assert.deepEqual(query("--execution", session, "--decision", "deny"), []);
  // Each approval: who asked (the exec, in the session), what for, and that MCP answered.
  const approvals = query("--kind", "approvals");
  assert.deepEqual(
    approvals.map((a) => [a.execution_id, a.session_id, a.path, a.decision, a.decided_by]),
    [
      [yes.structuredContent.execution_id, session, "/first", "allow", "mcp"],
      [no.structuredContent.execution_id, session, "/second", "deny", "mcp"],
    ],
  );
  const summary = JSON.parse(
    execFileSync(sluice, [
      "audit", "sql", "--db", db, "--format", "json",
      `SELECT receipt FROM executions WHERE id = '${session}'`,
    ]),
  )[0].receipt;
  const s = typeof summary === "string" ? JSON.parse(summary) : summary;
  assert.equal(s.ended_by, "client");
  assert.equal(s.execs.length, 4, JSON.stringify(s));
  execFileSync(sluice, ["audit", "verify", "--db", db]);
  console.log("PASS sdk_client_test");
} catch (err) {
  console.error("FAIL sdk_client_test:", err);
  process.exitCode = 1;
  await client.close().catch(() => {});
} finally {
  for (const s of [allowed, other, asked]) s.close();
  if (!process.env.KEEP) fs.rmSync(dir, { recursive: true, force: true });
  else console.log("kept", dir);
}
