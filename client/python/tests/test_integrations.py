# SPDX-License-Identifier: Apache-2.0
"""The framework integrations against real local HTTP servers: the
requests adapter and the httpx transports (sync and async) trip on 5xx and
refuse without reaching the server; the WSGI middleware (served by
wsgiref) and the ASGI middleware (served by a minimal asyncio HTTP server
below) answer 503 with a Retry-After matching retry_after_ms while a named
circuit is open, without calling the application. Skipped, with a
message, when requests or httpx is missing (python3-requests,
python3-httpx)."""

from __future__ import annotations

import asyncio
import http.client
import http.server
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest

from conftest import wait_until
from cbdclient import AsyncBreaker, AsyncClient, Breaker, CircuitOpenError
from cbdclient.middleware import (ASGIBreakerMiddleware, WSGIBreakerMiddleware,
                                  retry_after_seconds)


class Upstream:
    """A local HTTP server answering every GET with `status`, counting hits."""

    def __init__(self, status: int) -> None:
        outer = self
        self.hits = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                outer.hits += 1
                body = b"upstream"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream_502():
    u = Upstream(502)
    yield u
    u.close()


def test_requests_adapter_trips_on_5xx(client, name, upstream_502):
    requests = pytest.importorskip("requests", reason="requests missing: apt-get install python3-requests")
    from cbdclient.requests_adapter import BreakerAdapter
    b = Breaker(name, client, failure_threshold=2, break_ms=60000)
    s = requests.Session()
    s.mount("http://", BreakerAdapter(b))
    assert s.get(upstream_502.url).status_code == 502
    assert s.get(upstream_502.url).status_code == 502
    for _ in range(3):
        with pytest.raises(CircuitOpenError):
            s.get(upstream_502.url)
    assert upstream_502.hits == 2
    assert client.get(name)["snapshot"]["state"] == "open"


def test_httpx_transports_trip_on_5xx(cbd, client, name, upstream_502):
    httpx = pytest.importorskip("httpx", reason="httpx missing: apt-get install python3-httpx")
    from cbdclient.httpx_transport import AsyncBreakerTransport, BreakerTransport
    b = Breaker(f"{name}-sync", client, failure_threshold=2, break_ms=60000)
    with httpx.Client(transport=BreakerTransport(b)) as hc:
        assert [hc.get(upstream_502.url).status_code for _ in range(2)] == [502, 502]
        with pytest.raises(CircuitOpenError):
            hc.get(upstream_502.url)
    assert upstream_502.hits == 2

    async def main():
        async with AsyncClient(cbd.socket, io_timeout=5.0, connect_timeout=5.0) as ac:
            ab = AsyncBreaker(Breaker(f"{name}-async", ac, failure_threshold=2, break_ms=60000))
            async with httpx.AsyncClient(transport=AsyncBreakerTransport(ab)) as hc:
                assert (await hc.get(upstream_502.url)).status_code == 502
                assert (await hc.get(upstream_502.url)).status_code == 502
                with pytest.raises(CircuitOpenError):
                    await hc.get(upstream_502.url)
    asyncio.run(asyncio.wait_for(main(), 30))
    assert upstream_502.hits == 4


def _get(port: int) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/")
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def _open(client, name) -> int:
    """Open the circuit (break 60 s): its retry_after_ms."""
    client.set_state(name, "open")
    return client.get(name)["snapshot"]["retry_after_ms"]


def test_wsgi_middleware_answers_503_with_retry_after(client, name):
    calls = []

    def app(environ, start_response):
        calls.append(1)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"hello"]

    b = Breaker(name, client, break_ms=60000)
    b.call(lambda: None)  # creates the circuit with its policy

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args):
            pass

    server = make_server("127.0.0.1", 0, WSGIBreakerMiddleware(app, b), handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert _get(port)[0] == 200 and calls == [1]
        retry_after_ms = _open(client, name)
        wait_until(lambda: _get(port)[0] == 503)
        ran = len(calls)
        status, headers, body = _get(port)
        assert status == 503 and headers["retry-after"] == str(retry_after_seconds(retry_after_ms))
        assert b"open" in body and len(calls) == ran  # the application was not called
    finally:
        server.shutdown()
        server.server_close()
    assert retry_after_seconds(1500) == 2 and retry_after_seconds(0) == 1
    assert retry_after_seconds(2000) == 2


async def _serve_asgi(app):
    """A minimal HTTP/1.0 server for one ASGI app (GET only): enough to
    serve the middleware over a real socket."""
    async def handle(reader, writer):
        line = await reader.readline()
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
        method, path, _ = line.decode().split(" ", 2)
        scope = {"type": "http", "method": method, "path": path, "headers": []}
        out = {}

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(msg):
            if msg["type"] == "http.response.start":
                out["status"], out["headers"] = msg["status"], msg.get("headers", [])
            else:
                out.setdefault("body", b"")
                out["body"] += msg.get("body", b"")

        await app(scope, receive, send)
        head = f"HTTP/1.0 {out['status']} X\r\n".encode()
        for k, v in out["headers"]:
            head += k + b": " + v + b"\r\n"
        writer.write(head + b"\r\n" + out.get("body", b""))
        await writer.drain()
        writer.close()
    return await asyncio.start_server(handle, "127.0.0.1", 0)


def test_asgi_middleware_answers_503_with_retry_after(cbd, client, name):
    calls = []

    async def app(scope, receive, send):
        calls.append(1)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"hello"})

    async def main():
        async with AsyncClient(cbd.socket, io_timeout=5.0, connect_timeout=5.0) as ac:
            ab = AsyncBreaker(Breaker(name, ac, break_ms=60000))
            await ab.call(asyncio.sleep, 0)  # creates the circuit with its policy
            server = await _serve_asgi(ASGIBreakerMiddleware(app, ab))
            port = server.sockets[0].getsockname()[1]
            try:
                assert (await asyncio.to_thread(_get, port))[0] == 200 and calls == [1]
                retry_after_ms = await asyncio.to_thread(_open, client, name)
                for _ in range(1000):
                    status, headers, body = await asyncio.to_thread(_get, port)
                    if status == 503:
                        break
                    await asyncio.sleep(0.01)
                assert status == 503, status
                ran = len(calls)
                status, headers, body = await asyncio.to_thread(_get, port)
                assert status == 503
                assert headers["retry-after"] == str(retry_after_seconds(retry_after_ms))
                assert b"open" in body and len(calls) == ran  # the application was not called
            finally:
                server.close()
                await server.wait_closed()
    asyncio.run(asyncio.wait_for(main(), 30))


def test_core_needs_no_framework():
    """cbdclient and its middleware import without requests or httpx: the
    adapters are imported only by who uses them."""
    import os
    import subprocess
    import sys
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    code = ("import sys, cbdclient, cbdclient.middleware; "
            "assert 'requests' not in sys.modules and 'httpx' not in sys.modules, sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": src})
