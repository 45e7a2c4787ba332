// The AWS SDK for JavaScript (v3, pinned in tests/proxy/clients) inside `sluice run`: put and
// get through the proxy. Node does not read HTTPS_PROXY: a small agent opens the CONNECT
// tunnel. Prints one JSON line: {put, get_same} or {error}.
import { createRequire } from "node:module";
import http from "node:http";
import https from "node:https";
import tls from "node:tls";

const require = createRequire("/opt/clients/index.js");
const { S3Client, PutObjectCommand, GetObjectCommand } = require("@aws-sdk/client-s3");
const { NodeHttpHandler } = require("@smithy/node-http-handler");

const proxy = new URL(process.env.HTTPS_PROXY);
class TunnelAgent extends https.Agent {
  createConnection(options, done) {
    const target = `${options.host}:${options.port}`;
    const req = http.request({ host: proxy.hostname, port: proxy.port, method: "CONNECT",
                               path: target, headers: { host: target } });
    req.on("connect", (res, socket) => {
      if (res.statusCode !== 200) return done(new Error(`CONNECT ${res.statusCode}`));
      done(null, tls.connect({ socket, servername: options.servername || options.host }));
    });
    req.on("error", done);
    req.end();
  }
}

const client = new S3Client({
  endpoint: process.argv[2], region: "us-east-1", forcePathStyle: true,
  requestHandler: new NodeHttpHandler({ httpsAgent: new TunnelAgent({ keepAlive: true }) }),
});
const body = "written by @aws-sdk/client-s3 " + Date.now();
try {
  const put = await client.send(new PutObjectCommand({ Bucket: "bucket", Key: "sdk.txt", Body: body }));
  const got = await client.send(new GetObjectCommand({ Bucket: "bucket", Key: "sdk.txt" }));
  const text = await got.Body.transformToString();
  console.log(JSON.stringify({ put: put.$metadata.httpStatusCode, get_same: text === body }));
} catch (e) {
  console.log(JSON.stringify({ error: String(e), status: e.$metadata?.httpStatusCode }));
}
