// The `ws` WebSocket client (pinned in tests/proxy/clients) through the inspecting proxy, with
// a `ws` server on loopback: tests/proxy/websocket_node_test.cpp. The client opens the CONNECT
// tunnel itself (Node does not read HTTPS_PROXY), trusts only the proxy's CA, and sends the
// upgrade rule's placeholder in a text message, as an agent authenticating to a realtime API
// would; the server records whether it got the real value (never printing it) and echoes each
// message. Prints one JSON line of booleans and the close code.
//
// env: PROXY_PORT, PROXY_CA (PEM file), SERVER_CERT, SERVER_KEY (PEM files), HOST (the name the
// proxy resolves to 127.0.0.1), WS_SECRET (the value the proxy swaps in), WS_TOKEN (the
// placeholder).
import { createRequire } from 'node:module';
import http from 'node:http';
import https from 'node:https';
import tls from 'node:tls';
import { readFileSync } from 'node:fs';

const require = createRequire(import.meta.url);
const { WebSocket, WebSocketServer } = require('ws');
const env = process.env;
const seen = { texts: [], auth_header: null };

function serve() {
  const server = https.createServer({
    cert: readFileSync(env.SERVER_CERT), key: readFileSync(env.SERVER_KEY),
  });
  const wss = new WebSocketServer({ server });
  wss.on('connection', (ws, req) => {
    seen.auth_header = req.headers.authorization || '';
    ws.on('message', (data, isBinary) => {
      if (!isBinary) seen.texts.push(data.toString());
      ws.send(isBinary ? data : 'echo:' + data.toString());
    });
  });
  return new Promise((done) => server.listen(0, '127.0.0.1', () => done(server)));
}

class TunnelAgent extends https.Agent {
  createConnection(options, done) {
    const target = `${options.host}:${options.port}`;
    const req = http.request({ host: '127.0.0.1', port: Number(env.PROXY_PORT), method: 'CONNECT',
                               path: target, headers: { host: target } });
    req.on('connect', (res, socket) => {
      if (res.statusCode !== 200) return done(new Error(`CONNECT ${res.statusCode}`));
      done(null, tls.connect({ socket, servername: env.HOST, ca: readFileSync(env.PROXY_CA) }));
    });
    req.on('error', done);
    req.end();
  }
}

function talk(port) {
  return new Promise((done) => {
    const out = { replies: [] };
    const ws = new WebSocket(`wss://${env.HOST}:${port}/ws`, { agent: new TunnelAgent() });
    ws.on('open', () => ws.send(JSON.stringify({ type: 'auth', key: env.WS_TOKEN })));
    ws.on('message', (data) => {
      out.replies.push(data.toString());
      ws.close(1000, 'done');
    });
    ws.on('close', (code) => done({ ...out, close_code: code }));
    ws.on('error', (e) => done({ ...out, error: String(e) }));
  });
}

const server = await serve();
const got = await talk(server.address().port);
server.close();
const has = (s, what) => s.includes(what);
const reply = got.replies[0] || '';
console.log(JSON.stringify({
  error: got.error || null,
  server_got_secret: seen.texts.some((t) => has(t, env.WS_SECRET)),
  server_never_got_token: !seen.texts.some((t) => has(t, env.WS_TOKEN)) && seen.texts.length > 0,
  upgrade_injected: seen.auth_header === 'Bearer ' + env.WS_SECRET,
  reply_redacted: has(reply, '[redacted by sluice]') && !has(reply, env.WS_SECRET),
  close_code: got.close_code ?? 0,
}));
process.exit(0);
