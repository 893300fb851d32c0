# SPDX-License-Identifier: Apache-2.0
"""The example service (examples/service.py) end to end: its upstream goes
down, the retries fail, the circuit opens in cbd and, once the service's
cache has read the trip, it answers from its fallback. The upstream is
this test's, counting the attempts that reached it: each is reported to
cbd exactly once, however the attempts and the trip's event interleave."""

import http.server
import os
import re
import select
import subprocess
import sys
import threading
import urllib.error
import urllib.request

from conftest import Daemon, wait_until

from cbdclient import Client

HERE = os.path.dirname(os.path.abspath(__file__))
SERVICE = os.path.join(HERE, "..", "examples", "service.py")
# Bounds (seconds) on the service starting and on each HTTP request.
START_WAIT = 10.0
HTTP_WAIT = 10.0
# The operator's policy for the circuit (the service declares 5 only for
# circuits nobody configured): the third failure, the last attempt of one
# request, opens it, rather than a trip between two attempts racing the
# next one (a jittered 0 to 100 ms later) against the trip's event.
CONFIG = '[circuit "upstream"]\nfailure_threshold = 3\n'


class Upstream(http.server.BaseHTTPRequestHandler):
    """200 "upstream says hello", or 503 while down (each one counted)."""

    down = False
    failed = 0

    def do_GET(self):
        cls = type(self)
        if cls.down:
            cls.failed += 1
        body = b"upstream down\n" if cls.down else b"upstream says hello\n"
        self.send_response(503 if cls.down else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=HTTP_WAIT) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        return e.read().decode()


def test_example_service():
    cbd = Daemon(CONFIG)
    client = Client(cbd.socket, io_timeout=2.0, connect_timeout=2.0)
    Upstream.down, Upstream.failed = False, 0
    up = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    env = dict(os.environ, CBD_SOCKET=cbd.socket, PYTHONDONTWRITEBYTECODE="1")
    # cbd's answers wait up to 2 s: a loaded machine must not turn the
    # service's outcomes into local ones (cbd would not count them).
    proc = subprocess.Popen([sys.executable, SERVICE, "--port", "0", "--cbd-timeout-ms", "2000",
                             "--upstream", f"http://127.0.0.1:{up.server_address[1]}/"],
                            env=env, stderr=subprocess.PIPE, text=True)

    def totals():
        return client.get("upstream")["snapshot"]["totals"]
    try:
        ready, _, _ = select.select([proc.stderr], [], [], START_WAIT)
        assert ready, "the service did not start"
        m = re.match(r"serving on (\S+), upstream (\S+)", proc.stderr.readline())
        assert m, "no startup line"
        service = f"http://{m.group(1)}/"
        assert get(service) == "upstream says hello\n"
        # That request's outcomes at cbd: its success (a cached one is
        # written after a timer), after the failure of any attempt that
        # timed out first (on a loaded machine; the success reset its count).
        wait_until(lambda: totals()["successes"] == 1)
        failed = totals()["failures"]
        Upstream.down = True
        # 3 attempts failed (a 502); the third opened the circuit.
        assert get(service).startswith("upstream failed")
        # Once the trip's event has reached the service's cache it falls
        # back without trying the upstream (an attempt it made before,
        # from the cache, failed and is counted).
        wait_until(lambda: get(service).startswith("fallback: upstream unavailable"))
        assert get(service).startswith("fallback: upstream unavailable")
        snap = client.get("upstream")["snapshot"]
        assert snap["state"] == "open" and Upstream.failed >= 3
        # Every attempt that failed reached cbd, once.
        wait_until(lambda: totals()["failures"] - failed >= Upstream.failed)
        assert totals()["failures"] - failed == Upstream.failed
    finally:
        proc.terminate()
        proc.wait(10)
        up.shutdown()
        up.server_close()
        client.close()
        cbd.cleanup()
