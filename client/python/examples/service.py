#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""service.py — an example service protecting its upstream with cbd.

A small HTTP server (standard library only) whose every request calls an
upstream over urllib through a cbd breaker named "upstream", with retries
(exponential backoff, full jitter, a 500 ms per-attempt timeout) and a
fallback answer while the circuit is open. With --demo it also runs a
flaky upstream on loopback that fails every request while it is "down"
(toggle with GET /toggle on the upstream).

    cbd -s /tmp/cbd.sock &
    CBD_SOCKET=/tmp/cbd.sock python3 client/python/examples/service.py --demo
    curl localhost:8080/          # "upstream says hello" or the fallback
    curl localhost:8081/toggle    # take the demo upstream down / up
    cbctl -s /tmp/cbd.sock get upstream
"""

import argparse
import http.server
import os
import sys
import threading
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from cbdclient import Breaker, CircuitOpenError, Client, Retry, classify_http  # noqa: E402


def flaky_upstream(port: int) -> str:
    """A loopback upstream: 200, or 503 while down. Returns its URL."""
    state = {"down": False}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/toggle":
                state["down"] = not state["down"]
            status = 503 if state["down"] and self.path != "/toggle" else 200
            body = f"upstream {'down' if state['down'] else 'says hello'}\n".encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8080, help="0: any free port")
    ap.add_argument("--upstream", default="http://127.0.0.1:8081/")
    ap.add_argument("--demo", action="store_true", help="run a flaky upstream")
    ap.add_argument("--demo-port", type=int, default=8081, help="0: any free port")
    ap.add_argument("--cbd-timeout-ms", type=int, default=100,
                    help="how long to wait for cbd (connect, and each answer) before "
                    "the breaker decides locally")
    args = ap.parse_args()
    if args.demo:
        args.upstream = flaky_upstream(args.demo_port)

    # The circuit's policy is the operator's ([circuit "upstream"] in
    # cbd.conf); declared here only for circuits nobody configured.
    cbd = Client(connect_timeout=args.cbd_timeout_ms / 1000,
                 io_timeout=args.cbd_timeout_ms / 1000)
    breaker = Breaker("upstream", cbd, classify=classify_http, failure_threshold=5,
                      break_ms=10000,
                      on_state_change=lambda prev, new, err: print(
                          f"circuit upstream: {prev} -> {new}", file=sys.stderr))
    retry = Retry(breaker, attempts=3, base_ms=50, max_ms=500, attempt_timeout_ms=500,
                  timeout_kwarg="timeout",
                  retry_on=lambda e: classify_http(e).value == "failure")

    def fetch(timeout: float) -> bytes:
        with urllib.request.urlopen(args.upstream, timeout=timeout) as resp:
            return resp.read()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            headers = {}
            try:
                status, body = 200, retry.call(fetch)
            except CircuitOpenError as e:
                # The fallback, the same in every language's example.
                status, headers["Retry-After"] = 503, str(e.retry_after_ms // 1000 + 1)
                body = f"fallback: upstream unavailable, retry in {e.retry_after_ms} ms\n".encode()
            except Exception as e:  # the upstream failed every attempt
                status, body = 502, f"upstream failed: {e}\n".encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"serving on 127.0.0.1:{server.server_address[1]}, upstream {args.upstream}",
          file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
