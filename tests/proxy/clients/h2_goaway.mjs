// An HTTP/2 client (Node's own http2) through the proxy: CONNECT, TLS with ALPN h2, one stream
// to PATH; prints what it saw as one JSON line once the stream closes: the ALPN protocol, the
// GOAWAY it got (code, last stream id) and the stream's status. Used by
// tests/proxy/ask_inspect_test.cpp (a draining proxy sends GOAWAY). No npm packages.
//
//   node h2_goaway.mjs PROXY_PORT HOST:PORT CA_FILE PATH
import http from 'node:http';
import http2 from 'node:http2';
import tls from 'node:tls';
import { readFileSync } from 'node:fs';

const [proxyPort, authority, caFile, path] = process.argv.slice(2);
const result = { alpn: null, goaway: null, status: null, error: null };
const done = () => {
  console.log(JSON.stringify(result));
  process.exit(0);
};
setTimeout(done, 20000);
const req = http.request({ host: '127.0.0.1', port: Number(proxyPort), method: 'CONNECT',
  path: authority, headers: { host: authority } });
req.on('connect', (res, socket) => {
  if (res.statusCode !== 200) {
    result.error = 'CONNECT answered ' + res.statusCode;
    done();
  }
  const s = tls.connect({ socket, servername: authority.split(':')[0], ca: readFileSync(caFile),
    ALPNProtocols: ['h2'] });
  s.on('secureConnect', () => { result.alpn = s.alpnProtocol; });
  s.on('error', (e) => { result.error = e.message; });
  const session = http2.connect('https://' + authority, { createConnection: () => s });
  session.on('goaway', (code, last) => { result.goaway = { code, last }; });
  session.on('error', () => {});
  const st = session.request({ ':path': path });
  st.on('response', (h) => { result.status = h[':status']; });
  st.on('error', () => {});
  st.on('close', done);
  st.resume();
});
req.on('error', (e) => {
  result.error = e.message;
  done();
});
req.end();
