"""The example service (examples/service.py) end to end: its demo upstream
goes down, the retries fail, the circuit opens in cbd and the service
answers from its fallback."""

import os
import re
import select
import subprocess
import sys
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SERVICE = os.path.join(HERE, "..", "examples", "service.py")
# Bounds (seconds) on the service starting and on each HTTP request.
START_WAIT = 10.0
HTTP_WAIT = 10.0


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=HTTP_WAIT) as r:
            return r.read().decode()
    except urllib.error.HTTPError as e:
        return e.read().decode()


def test_example_service(cbd, client):
    env = dict(os.environ, CBD_SOCKET=cbd.socket, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.Popen([sys.executable, SERVICE, "--demo", "--port", "0",
                             "--demo-port", "0"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stderr], [], [], START_WAIT)
        assert ready, "the service did not start"
        m = re.match(r"serving on (\S+), upstream (\S+)", proc.stderr.readline())
        assert m, "no startup line"
        service, upstream = f"http://{m.group(1)}/", m.group(2)
        assert get(service) == "upstream says hello\n"
        assert get(upstream + "toggle") == "upstream down\n"
        answers = [get(service) if i else None for i in range(1, 4)]
        # 3 attempts failed (a 502), then 2 more opened the circuit
        # (failure_threshold 5) and the third attempt fell back.
        assert answers[0].startswith("upstream failed")
        assert answers[1].startswith("cached answer") and answers[2].startswith("cached answer")
        snap = client.get("upstream")["snapshot"]
        assert snap["state"] == "open" and snap["totals"]["failures"] == 5
    finally:
        proc.terminate()
        proc.wait(10)
