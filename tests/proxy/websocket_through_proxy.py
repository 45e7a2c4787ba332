#!/usr/bin/python3
"""WebSocket frames through the inspecting proxy, with Python's `websockets` on both ends.

  websocket_through_proxy.py PROXY_PORT PROXY_CA_PEM UPSTREAM_CERT_PEM UPSTREAM_KEY_PEM

Environment: WS_SECRET (the value the proxy swaps in; the server compares against it and never
prints it), WS_TOKEN (the upgrade rule's placeholder), OTHER_TOKEN (another rule's).

Starts a TLS WebSocket server on 127.0.0.1 (port 0) for the names ws.test and other.test that
echoes every message ("echo:" + text; binary as is) and records what it received; then, as a
client through the proxy (CONNECT, TLS to the proxy's leaf), sends: a text message with the
placeholder, the same split over three fragments, a binary message, a ping, and a normal close;
and on a second connection a text message holding the other rule's token. Prints one JSON
object of booleans and close codes (never a secret).
"""
import asyncio
import json
import os
import socket
import ssl
import sys

import websockets

SECRET = os.environ["WS_SECRET"]
TOKEN = os.environ["WS_TOKEN"]
OTHER = os.environ["OTHER_TOKEN"]
REDACTED = "[redacted by sluice]"

server_log = {"texts": [], "binary": [], "extensions": [], "close_codes": []}


async def echo(ws, path):
    server_log["extensions"].append(ws.request_headers.get("Sec-WebSocket-Extensions"))
    try:
        async for msg in ws:
            if isinstance(msg, str):
                server_log["texts"].append(msg)
                await ws.send("echo:" + msg)
            else:
                server_log["binary"].append(msg)
                await ws.send(msg)
    except websockets.exceptions.ConnectionClosed:
        pass  # the proxy's 1008 close arrives as an error close
    finally:
        server_log["close_codes"].append(ws.close_code)


def tunnel(proxy_port, host, port):
    s = socket.create_connection(("127.0.0.1", proxy_port), timeout=20)
    s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port, host, port)).encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            raise RuntimeError("proxy closed the CONNECT")
        head += chunk
    if b" 200 " not in head.split(b"\r\n")[0]:
        raise RuntimeError("CONNECT refused: " + head.split(b"\r\n")[0].decode())
    s.setblocking(False)
    return s


async def client_session(proxy_port, ctx, port, out):
    sock = tunnel(proxy_port, "ws.test", port)
    async with websockets.connect("wss://ws.test:%d/ws" % port, sock=sock, ssl=ctx,
                                  server_hostname="ws.test") as ws:
        await ws.send("key=" + TOKEN)
        out["reply_swapped"] = await ws.recv()
        # The token split across three fragments (continuation frames).
        await ws.send(iter(["first " + TOKEN[:10], TOKEN[10:30], TOKEN[30:] + " last"]))
        out["reply_fragmented"] = await ws.recv()
        await ws.send(b"\x00\x01binary" + TOKEN.encode())
        out["binary_echo_ok"] = (await ws.recv()) == b"\x00\x01binary" + TOKEN.encode()
        pong = await ws.ping(b"are you there")
        await asyncio.wait_for(pong, 10)
        out["pong"] = True
    out["normal_close_code"] = ws.close_code


async def leak_session(proxy_port, ctx, port, out):
    sock = tunnel(proxy_port, "ws.test", port)
    ws = await websockets.connect("wss://ws.test:%d/ws" % port, sock=sock, ssl=ctx,
                                  server_hostname="ws.test")
    await ws.send("harmless")
    out["before_leak"] = await ws.recv()
    await ws.send("stolen=" + OTHER)
    try:
        extra = await asyncio.wait_for(ws.recv(), 10)
        out["after_leak_reply"] = extra
    except websockets.exceptions.ConnectionClosed as e:
        out["leak_close_code"] = e.code
    await ws.close()


async def main():
    proxy_port, proxy_ca, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(cert, key)
    server = await websockets.serve(echo, "127.0.0.1", 0, ssl=sctx)
    port = server.sockets[0].getsockname()[1]
    ctx = ssl.create_default_context(cafile=proxy_ca)
    out = {}
    await client_session(proxy_port, ctx, port, out)
    await leak_session(proxy_port, ctx, port, out)
    server.close()
    await server.wait_closed()
    texts = server_log["texts"]
    result = {
        "server_got_secret": len(texts) > 0 and texts[0] == "key=" + SECRET,
        "server_got_fragmented_secret":
            len(texts) > 1 and texts[1] == "first " + SECRET + " last",
        "server_never_got_token": all(TOKEN not in t for t in texts),
        "server_never_got_other_token": all(OTHER not in t for t in texts),
        "binary_unchanged": server_log["binary"] == [b"\x00\x01binary" + TOKEN.encode()],
        "binary_echo_ok": out.get("binary_echo_ok", False),
        "extensions_stripped": all(e is None for e in server_log["extensions"]),
        "reply_redacted": out.get("reply_swapped") == "echo:key=" + REDACTED,
        "fragmented_reply_redacted":
            out.get("reply_fragmented") == "echo:first " + REDACTED + " last",
        "client_never_saw_secret": all(SECRET not in str(v) for v in out.values()),
        "pong": out.get("pong", False),
        "normal_close_code": out.get("normal_close_code"),
        "before_leak_ok": out.get("before_leak") == "echo:harmless",
        "leak_close_code": out.get("leak_close_code"),
        "after_leak_reply": "after_leak_reply" in out,
        "server_texts": len(texts),
        "server_close_codes": server_log["close_codes"],
    }
    print(json.dumps(result))


asyncio.run(main())
