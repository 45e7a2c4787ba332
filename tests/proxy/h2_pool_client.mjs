// An HTTP/2 client (Node's own http2) through the inspecting proxy for H2Test's pool tests: six
// streams to /v1/hold/N that the upstream answers only when the test releases them (they hold
// every pooled HTTP/1.1 upstream connection), then, once the file GO_FILE exists, one stream
// the policy refuses and one more allowed stream. Prints a JSON line as soon as the refused
// stream is answered ({denied}), and one when all are done ({holds, queued}).
//
// env: PROXY_PORT, PROXY_CA (PEM file), HOST, PORT (the upstream), GO_FILE.
import http from 'node:http';
import http2 from 'node:http2';
import tls from 'node:tls';
import { existsSync, readFileSync } from 'node:fs';

const env = process.env;
const authority = `${env.HOST}:${env.PORT}`;

function tunnel() {
  return new Promise((done, fail) => {
    const req = http.request({ host: '127.0.0.1', port: Number(env.PROXY_PORT), method: 'CONNECT',
                               path: authority, headers: { host: authority } });
    req.on('connect', (res, socket) => res.statusCode === 200 ? done(socket)
                                                              : fail(new Error(`CONNECT ${res.statusCode}`)));
    req.on('error', fail);
    req.end();
  });
}

const socket = await tunnel();
const session = http2.connect(`https://${authority}`, {
  createConnection: () => tls.connect({ socket, servername: env.HOST, ALPNProtocols: ['h2'],
                                        ca: readFileSync(env.PROXY_CA) }),
});
const get = (path) => new Promise((done) => {
  const req = session.request({ ':method': 'GET', ':path': path });
  let status = 0;
  req.on('response', (h) => { status = h[':status']; });
  req.on('data', () => {});
  req.on('end', () => done(status));
  req.on('error', () => done(-1));
  req.end();
});

const holds = [1, 2, 3, 4, 5, 6].map((i) => get(`/v1/hold/${i}`));
while (!existsSync(env.GO_FILE)) await new Promise((r) => setTimeout(r, 10));
const denied = await get('/v1/admin/x');
console.log(JSON.stringify({ denied }));
const queued = await get('/v1/queued');
console.log(JSON.stringify({ holds: await Promise.all(holds), queued }));
session.close();
