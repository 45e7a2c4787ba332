// A gRPC server and client (@grpc/grpc-js) on loopback, the client going through the proxy
// (grpc_proxy, an HTTP CONNECT) and trusting only the proxy's CA: tests/proxy/grpc_test.cpp.
// The server checks the authorization metadata the proxy injects (it reports only whether it
// matched, never the value). Prints one JSON line of results.
//
// env: GRPC_PROXY_URL, PROXY_CA (PEM file), SERVER_CERT, SERVER_KEY (PEM files), HOST (the name
// the proxy resolves to 127.0.0.1), EXPECTED_AUTH (the injected value the server expects);
// SERVER_IDLE_MS: the server closes connections idle that long (GOAWAY), and one more call
// ("after_idle") is made after three times that.
import * as grpc from '@grpc/grpc-js';
import { readFileSync } from 'node:fs';

const raw = { serialize: (b) => b, deserialize: (b) => b };
const method = (name, responseStream) => ({
  path: `/test.Echo/${name}`,
  requestStream: false,
  responseStream,
  requestSerialize: raw.serialize,
  requestDeserialize: raw.deserialize,
  responseSerialize: raw.serialize,
  responseDeserialize: raw.deserialize,
});
const service = {
  Unary: method('Unary', false),
  Watch: method('Watch', true),
  Admin: method('Admin', false),
};

const seen = { unary_auth_ok: null, admin_reached: false };

function serve() {
  const idle = Number(process.env.SERVER_IDLE_MS || 0);
  const server = new grpc.Server(idle ? { 'grpc.max_connection_idle_ms': idle } : {});
  server.addService(service, {
    Unary(call, cb) {
      const auth = call.metadata.get('authorization');
      seen.unary_auth_ok = auth.length === 1 && auth[0] === process.env.EXPECTED_AUTH;
      const trailer = new grpc.Metadata();
      trailer.set('x-served-by', 'grpc-test');
      cb(null, Buffer.from('pong:' + call.request.toString()), trailer);
    },
    Watch(call) {
      for (let i = 0; i < 5; i++) call.write(Buffer.from('tick' + i));
      call.end();
    },
    Admin(call, cb) {
      seen.admin_reached = true;
      cb(null, Buffer.from('admin'));
    },
  });
  const creds = grpc.ServerCredentials.createSsl(null, [
    { cert_chain: readFileSync(process.env.SERVER_CERT), private_key: readFileSync(process.env.SERVER_KEY) },
  ]);
  return new Promise((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', creds, (err, port) => (err ? reject(err) : resolve([server, port]))),
  );
}

// The result once both the callback and the status (with the trailers) have come.
function unary(client, name, payload) {
  return new Promise((resolve) => {
    const r = {};
    let parts = 0;
    const done = () => { if (++parts === 2) resolve(r); };
    const call = client.makeUnaryRequest(service[name].path, raw.serialize, raw.deserialize,
      Buffer.from(payload), new grpc.Metadata(), {}, (err, value) => {
        Object.assign(r, { code: err ? err.code : 0, details: err ? err.details : '',
          value: value ? value.toString() : null });
        done();
      });
    call.on('status', (s) => { r.trailers = s.metadata.get('x-served-by'); done(); });
  });
}

function watch(client) {
  return new Promise((resolve) => {
    const got = [];
    const call = client.makeServerStreamRequest(service.Watch.path, raw.serialize,
      raw.deserialize, Buffer.from('go'), new grpc.Metadata(), {});
    call.on('data', (d) => got.push(d.toString()));
    call.on('status', (s) => resolve({ code: s.code, messages: got }));
    call.on('error', () => {});
  });
}

const [server, port] = await serve();
process.env.grpc_proxy = process.env.GRPC_PROXY_URL;
const Client = grpc.makeGenericClientConstructor({}, 'Echo');
const client = new Client(`${process.env.HOST}:${port}`,
  grpc.credentials.createSsl(readFileSync(process.env.PROXY_CA)));
const results = {
  unary: await unary(client, 'Unary', 'ping'),
  watch: await watch(client),
  admin: await unary(client, 'Admin', 'x'),
  again: await unary(client, 'Unary', 'ping2'),
};
if (process.env.SERVER_IDLE_MS) {
  await new Promise((r) => setTimeout(r, 3 * Number(process.env.SERVER_IDLE_MS)));
  results.after_idle = await unary(client, 'Unary', 'ping3');
}
results.unary_auth_ok = seen.unary_auth_ok;
results.admin_reached = seen.admin_reached;
console.log(JSON.stringify(results));
client.close();
server.forceShutdown();
