# SPDX-License-Identifier: Apache-2.0
"""conftest.py — the pytest fixtures: a real cbd started on a socket in a
temporary directory (path from $CBD_BINARY), stopped at the end; every
wait bounded."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "src"))

# Bounded waits (seconds): cbd starting to answer, and stopping.
START_WAIT = 10.0
STOP_WAIT = 10.0
# Bound on waiting for a condition (an event, a queued outcome to land).
WAIT = 10.0

_names = itertools.count(1)


def cbd_binary() -> str:
    path = os.environ.get("CBD_BINARY")
    if not path:
        guess = os.path.join(HERE, "..", "..", "..", "build", "src", "cbd")
        path = guess if os.path.exists(guess) else ""
    return path


def _hello(sock_path: str) -> bool:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(sock_path)
        s.sendall(b'{"op":"hello"}\n')
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(4096)
            if not chunk:
                return False
            data += chunk
        return json.loads(data).get("ok") is True
    except OSError:
        return False
    finally:
        s.close()


class Daemon:
    """One cbd on a private socket."""

    def __init__(self, config: str | None = None) -> None:
        binary = cbd_binary()
        if not binary:
            pytest.skip("CBD_BINARY is not set")
        self.dir = tempfile.mkdtemp(prefix="cbd-py.")
        self.socket = os.path.join(self.dir, "cbd.sock")
        self.log = os.path.join(self.dir, "cbd.log")
        self.args = [binary, "-s", self.socket]
        if config is not None:
            conf = os.path.join(self.dir, "cbd.conf")
            with open(conf, "w") as f:
                f.write(config)
            self.args += ["-c", conf]
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=log)
        deadline = time.monotonic() + START_WAIT
        while not _hello(self.socket):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"cbd did not start: {open(self.log).read()}")
            time.sleep(0.01)

    def stop(self) -> None:
        """SIGTERM (after SIGCONT, should it be stopped); SIGKILL after the
        bounded wait."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(STOP_WAIT)

    def kill(self) -> None:
        """SIGKILL: gone without a goodbye (the socket file stays)."""
        self.proc.kill()
        self.proc.wait(STOP_WAIT)

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def cleanup(self) -> None:
        self.stop()
        for f in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, f))
        os.rmdir(self.dir)


def wait_until(cond, timeout: float = WAIT):
    """Poll cond() until it is true (returned), at most timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(0.002)


@pytest.fixture(scope="session")
def cbd():
    """One cbd for the tests that only use their own circuit names."""
    d = Daemon()
    yield d
    d.cleanup()


@pytest.fixture
def own_cbd():
    """A cbd of this test alone (killed, stopped or restarted)."""
    d = Daemon()
    yield d
    d.cleanup()


@pytest.fixture
def name(request) -> str:
    """A circuit name no other test uses."""
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", request.node.name)[:200]
    return f"{base}-{next(_names)}"


@pytest.fixture
def client(cbd):
    from cbdclient import Client
    c = Client(cbd.socket, io_timeout=2.0, connect_timeout=2.0)
    yield c
    c.close()
