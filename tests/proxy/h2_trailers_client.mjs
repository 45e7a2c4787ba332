// An HTTP/2 client (Node's own http2) through the inspecting proxy that sends request trailers,
// as gRPC and checksumming uploaders do: POST PATH with a body and a trailer section
// (x-checksum, and TRAILER_TOKEN as x-token when set). For H2Test's trailer tests. Prints one
// JSON line: {status, reason}.
//
// env: PROXY_PORT, PROXY_CA (PEM file), HOST, PORT (the upstream), PATH_ (the request path),
// TRAILER_TOKEN (optional).
import http from 'node:http';
import http2 from 'node:http2';
import tls from 'node:tls';
import { readFileSync } from 'node:fs';

const env = process.env;
const authority = `${env.HOST}:${env.PORT}`;
const socket = await new Promise((done, fail) => {
  const req = http.request({ host: '127.0.0.1', port: Number(env.PROXY_PORT), method: 'CONNECT',
                             path: authority, headers: { host: authority } });
  req.on('connect', (res, s) => res.statusCode === 200 ? done(s)
                                                       : fail(new Error(`CONNECT ${res.statusCode}`)));
  req.on('error', fail);
  req.end();
});
const session = http2.connect(`https://${authority}`, {
  createConnection: () => tls.connect({ socket, servername: env.HOST, ALPNProtocols: ['h2'],
                                        ca: readFileSync(env.PROXY_CA) }),
});
const result = await new Promise((done) => {
  const req = session.request({ ':method': 'POST', ':path': env.PATH_ }, { waitForTrailers: true });
  let status = 0;
  let reason = '';
  req.on('wantTrailers', () => {
    const trailers = { 'x-checksum': 'sha256-2cf24dba' };
    if (env.TRAILER_TOKEN) trailers['x-token'] = env.TRAILER_TOKEN;
    req.sendTrailers(trailers);
  });
  req.on('response', (h) => { status = h[':status']; reason = h['x-sluice-reason'] || ''; });
  req.on('data', () => {});
  req.on('end', () => done({ status, reason }));
  req.on('error', (e) => done({ status, reason, error: String(e) }));
  req.write('hello ');
  req.end('trailers');
});
console.log(JSON.stringify(result));
session.close();
