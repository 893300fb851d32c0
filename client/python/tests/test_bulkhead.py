# SPDX-License-Identifier: Apache-2.0
"""test_bulkhead.py — the bulkhead and the retry budget (protocol 3 §2,
§3) through the breaker, against a real cbd: never more than N calls in
flight across processes and threads (a counting server fails on N+1), a
killed process's ticket handed to a waiter, wait_ms expiry
(BulkheadFullError), the ticket back on an exception, a BaseException and
asyncio cancellation (while the call runs and while it waits), cached
breakers taking the round trip on a limited circuit, retries marked and
stopped by the retry budget (RetryBudgetError), exact totals."""

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import wait_until

from cbdclient import (IGNORE, AsyncBreaker, AsyncClient, Breaker, BulkheadFullError,
                       CircuitOpenError, Client, RefusedError, Retry, RetryBudgetError)

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


class CountingServer:
    """A Unix-socket server that counts the requests in flight: each
    connection is one request, held `hold` seconds, answered "ok"; the
    most seen at once is `peak`, and `over` counts requests that found
    `limit` already in flight."""

    def __init__(self, path, limit, hold=0.01):
        self.path, self.limit, self.hold = path, limit, hold
        self.lock = threading.Lock()
        self.now = self.peak = self.over = self.total = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(128)
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with conn:
            conn.recv(16)
            with self.lock:
                self.now += 1
                self.total += 1
                if self.now > self.limit:
                    self.over += 1
                self.peak = max(self.peak, self.now)
            time.sleep(self.hold)
            with self.lock:
                self.now -= 1
            conn.sendall(b"ok")

    def close(self):
        self.sock.close()


def hit(path):
    """One request to the counting server."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    with s:
        s.connect(path)
        s.sendall(b"x")
        assert s.recv(16) == b"ok"


# A worker process: THREADS threads, each CALLS calls through a breaker
# on the circuit (max_concurrent N, waiting up to 10 s for a ticket).
WORKER = r"""
import socket, sys, threading
from cbdclient import Breaker, Client
sock, name, limit, threads, calls, server = sys.argv[1:7]
client = Client(sock, io_timeout=2.0, connect_timeout=2.0)
b = Breaker(name, client, max_concurrent=int(limit), wait_ms=10000)
def hit():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    with s:
        s.connect(server)
        s.sendall(b"x")
        assert s.recv(16) == b"ok"
errors = []
def run():
    for _ in range(int(calls)):
        try:
            b.call(hit)
        except Exception as e:
            errors.append(e)
ts = [threading.Thread(target=run) for _ in range(int(threads))]
for t in ts: t.start()
for t in ts: t.join()
stats = b.cache_stats()
print("errors", len(errors), repr(errors[:1]), "cached", stats.cached_calls if stats else -1)
sys.exit(1 if errors else 0)
"""

# A process that takes a ticket and holds it until killed.
HOLDER = r"""
import sys, time
from cbdclient import Breaker, Client
sock, name = sys.argv[1:3]
b = Breaker(name, Client(sock, io_timeout=2.0, connect_timeout=2.0), max_concurrent=1,
            cached=False)
p = b.acquire()
print("held", p.token, flush=True)
time.sleep(600)
"""


def _env():
    env = dict(os.environ, PYTHONPATH=SRC, PYTHONDONTWRITEBYTECODE="1")
    return env


def snapshot(client, name):
    return client.get(name, policy=False)["snapshot"]


def test_never_more_than_n_in_flight_across_processes(cbd, client, name, tmp_path):
    limit, procs, threads, calls = 3, 3, 4, 10
    server = CountingServer(str(tmp_path / "count.sock"), limit)
    try:
        workers = [subprocess.Popen(
            [sys.executable, "-c", WORKER, cbd.socket, name, str(limit), str(threads),
             str(calls), server.path], env=_env(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT) for _ in range(procs)]
        outs = [w.communicate(timeout=120)[0].decode() for w in workers]
        for w, out in zip(workers, outs):
            assert w.returncode == 0, out
            # A ticket is never granted from a cache: no call was cached.
            assert "cached 0" in out, out
    finally:
        server.close()
    n = procs * threads * calls
    assert server.total == n
    assert server.over == 0, f"{server.peak} calls in flight, limit {limit}"
    assert server.peak <= limit
    snap = snapshot(client, name)
    assert snap["in_flight"] == 0
    assert snap["totals"]["successes"] == n
    assert snap["totals"]["rejected_concurrency"] == 0


def test_killed_process_ticket_goes_to_a_waiter(cbd, client, name):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, cbd.socket, name], env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        line = holder.stdout.readline().decode()
        assert line.startswith("held "), line
        assert snapshot(client, name)["in_flight"] == 1
        b = Breaker(name, Client(cbd.socket, io_timeout=2.0), max_concurrent=1,
                    wait_ms=30000, cached=False)
        got = []
        t = threading.Thread(target=lambda: got.append(b.acquire()))
        t.start()
        wait_until(lambda: client.stats()["waiters"] == 1)
        holder.kill()
        t.join(30)
        assert got and got[0].token, "the waiter did not get the freed ticket"
        assert snapshot(client, name)["in_flight"] == 1
        b.report(got[0], "success")
        assert snapshot(client, name)["in_flight"] == 0
        assert snapshot(client, name)["totals"]["rejected_concurrency"] == 0
    finally:
        holder.kill()
        holder.wait()


def test_wait_expiry_and_no_wait_give_bulkhead_full(cbd, client, name):
    holder = Breaker(name, Client(cbd.socket, io_timeout=2.0), max_concurrent=1, cached=False)
    p = holder.acquire()
    assert p.token
    for wait_ms in (0, 50):
        b = Breaker(name, Client(cbd.socket, io_timeout=2.0), max_concurrent=1,
                    wait_ms=wait_ms)
        with pytest.raises(BulkheadFullError) as e:
            b.call(lambda: pytest.fail("ran without a ticket"))
        assert isinstance(e.value, RefusedError)
        assert not isinstance(e.value, CircuitOpenError)
        assert e.value.reason == "concurrency" and e.value.in_flight == 1
        assert e.value.retry_after_ms == 0 and e.value.state == "closed"
        b.close()
    # A fallback gets the bulkhead's refusal too.
    b = Breaker(name, Client(cbd.socket, io_timeout=2.0), max_concurrent=1, cached=False,
                fallback=lambda err: err)
    assert isinstance(b.call(lambda: None), BulkheadFullError)
    holder.report(p, "success")
    assert b.call(lambda: 7) == 7
    snap = snapshot(client, name)
    assert snap["in_flight"] == 0
    assert snap["totals"]["rejected_concurrency"] == 3
    assert snap["totals"]["rejected"] == 0
    assert snap["state"] == "closed"


def test_open_circuit_is_not_bulkhead_full(cbd, client, name):
    b = Breaker(name, Client(cbd.socket, io_timeout=2.0), max_concurrent=2, cached=False,
                failure_threshold=1)
    with pytest.raises(ZeroDivisionError):
        b.call(lambda: 1 / 0)
    with pytest.raises(CircuitOpenError) as e:
        b.call(lambda: None)
    assert e.value.reason == "open" and e.value.retry_after_ms > 0
    assert not isinstance(e.value, BulkheadFullError)
    assert snapshot(client, name)["in_flight"] == 0


def test_ticket_back_on_exception_and_base_exception(cbd, client, name):
    b = Breaker(name, Client(cbd.socket, io_timeout=2.0), max_concurrent=1)

    def check_held():
        assert snapshot(client, name)["in_flight"] == 1
        raise ValueError("boom")

    with pytest.raises(ValueError):
        b.call(check_held)
    assert snapshot(client, name)["in_flight"] == 0

    class Stop(BaseException):
        pass

    def stop():
        raise Stop()

    with pytest.raises(Stop):
        b.call(stop)
    snap = snapshot(client, name)
    assert snap["in_flight"] == 0
    assert snap["totals"]["failures"] == 1 and snap["totals"]["ignored"] == 1


@pytest.mark.parametrize("use_async_client", [True, False])
def test_ticket_back_on_asyncio_cancellation(cbd, client, name, use_async_client):
    async def main():
        c = (AsyncClient(cbd.socket, io_timeout=2.0) if use_async_client
             else Client(cbd.socket, io_timeout=2.0))
        ab = AsyncBreaker(Breaker(name, c, max_concurrent=1, wait_ms=30000))
        started = asyncio.Event()

        async def forever():
            started.set()
            await asyncio.sleep(3600)

        # Cancelled while the call runs.
        task = asyncio.create_task(ab.call(forever))
        await started.wait()
        assert snapshot(client, name)["in_flight"] == 1
        # Cancelled while it waits for a ticket: the grant that comes later
        # is handed back.
        waiter = asyncio.create_task(ab.call(forever))
        while client.stats()["waiters"] != 1:
            await asyncio.sleep(0.005)
        waiter.cancel()
        task.cancel()
        for t in (task, waiter):
            with pytest.raises(asyncio.CancelledError):
                await t
        deadline = time.monotonic() + 10
        while snapshot(client, name)["in_flight"] != 0:
            assert time.monotonic() < deadline, "a ticket was not handed back"
            await asyncio.sleep(0.005)
        assert await ab.call(asyncio.sleep, 0, "x") == "x"
        ab.close()
        if use_async_client:
            await c.close()

    asyncio.run(main())
    snap = snapshot(client, name)
    assert snap["in_flight"] == 0
    assert snap["totals"]["ignored"] == 2 and snap["totals"]["successes"] == 1


def test_cached_breaker_takes_the_round_trip_on_a_limited_circuit(cbd, client, name):
    b = Breaker(name, Client(cbd.socket, io_timeout=2.0), max_concurrent=2)
    assert b.cached
    for _ in range(20):
        b.call(lambda: None)
    stats = b.cache_stats()
    assert stats.cached_calls == 0
    snap = snapshot(client, name)
    assert snap["totals"]["successes"] == 20 and snap["in_flight"] == 0
    # A circuit without a limit is still served by the cache.
    free = Breaker(name + "-free", Client(cbd.socket, io_timeout=2.0))

    def served_by_the_cache():  # once its watch reply came (load: later)
        free.call(lambda: None)
        return free.cache_stats().cached_calls > 0
    wait_until(served_by_the_cache)
    b.close()
    free.close()


def test_limit_from_the_config_is_honoured_by_a_cached_breaker(tmp_path):
    from conftest import Daemon
    d = Daemon('[circuit "cfg"]\nmax_concurrent = 1\n')
    try:
        c = Client(d.socket, io_timeout=2.0)
        b = Breaker("cfg", c)  # declares nothing: cbd's policy says 1
        b.call(lambda: None)  # the first call asks cbd
        held = b.acquire()
        assert held.token
        with pytest.raises(BulkheadFullError):
            b.acquire()
        b.report(held, "success")
        assert b.cache_stats().cached_calls == 0
        snap = c.get("cfg")["snapshot"]
        assert snap["in_flight"] == 0 and snap["totals"]["rejected_concurrency"] == 1
        b.close()
        c.close()
    finally:
        d.cleanup()


FIXED_NOW = 1_800_000_000_000


def test_retry_helper_marks_retries_and_stops_at_the_budget(cbd, client, name):
    # No budget to speak of: 10 retries in 10 s (retry_min_per_s 1), 0 %
    # of first attempts. The errors are ignored so the breaker stays closed.
    b = Breaker(name, Client(cbd.socket, io_timeout=2.0), retry_budget_percent=0,
                retry_min_per_s=1, classify=lambda e: IGNORE, clock=lambda: FIXED_NOW)
    calls = []

    def failing():
        calls.append(1)
        raise ConnectionError("down")

    r = Retry(b, attempts=3, base_ms=0, max_ms=0, sleep=lambda s: None)
    outcomes = []
    for _ in range(8):
        try:
            r.call(failing)
        except RetryBudgetError as e:
            assert e.reason == "retry_budget" and e.retry_after_ms > 0
            outcomes.append("budget")
        except ConnectionError:
            outcomes.append("failed")
    # Runs 1-5 retry twice each (10 retries), then the budget refuses the
    # first retry of every run: the helper stops at it.
    assert outcomes == ["failed"] * 5 + ["budget"] * 3
    assert len(calls) == 5 * 3 + 3
    totals = client.get(name, {"now": FIXED_NOW}, policy=False)["snapshot"]["totals"]
    assert totals["retries"] == 10
    assert totals["rejected_retry"] == 3
    assert totals["rejected"] == 0 and totals["rejected_concurrency"] == 0
    assert totals["ignored"] == len(calls)


def test_async_retry_stops_at_the_budget(cbd, client, name):
    b = Breaker(name, Client(cbd.socket, io_timeout=2.0), retry_budget_percent=0,
                retry_min_per_s=0, classify=lambda e: IGNORE, clock=lambda: FIXED_NOW)
    calls = []

    async def failing():
        calls.append(1)
        raise ConnectionError("down")

    r = Retry(b, attempts=4, base_ms=0, max_ms=0)
    with pytest.raises(RetryBudgetError):
        asyncio.run(r.call_async(failing))
    assert len(calls) == 1
    totals = client.get(name, {"now": FIXED_NOW}, policy=False)["snapshot"]["totals"]
    assert totals["retries"] == 0 and totals["rejected_retry"] == 1


def test_retries_are_marked_on_a_cached_breaker(cbd, client, name):
    b = Breaker(name, Client(cbd.socket, io_timeout=2.0), classify=lambda e: IGNORE)
    assert b.cached
    flaky = iter([ConnectionError("a"), ConnectionError("b"), None])

    def fn():
        e = next(flaky)
        if e is not None:
            raise e
        return "ok"

    assert Retry(b, attempts=3, base_ms=0, max_ms=0, sleep=lambda s: None).call(fn) == "ok"
    totals = snapshot(client, name)["totals"]
    assert totals["retries"] == 2 and totals["rejected_retry"] == 0
    b.close()


def test_refusals_say_why_cached_and_not(cbd, client, name):
    b = Breaker(name, Client(cbd.socket, io_timeout=2.0))
    b.call(lambda: None)  # the first call asks cbd, creating the circuit

    def reasons_until_cached():
        """Call until the cache refused one (the event comes a little
        later than cbd's state): the refusals' reasons."""
        reasons, before = [], b.cache_stats().local_refusals

        def refused_locally():
            try:
                b.call(lambda: None)
            except CircuitOpenError as e:
                reasons.append(e.reason)
            return b.cache_stats().local_refusals > before
        wait_until(refused_locally)
        return set(reasons)

    client.set_state(name, "open", hold=True)
    assert reasons_until_cached() == {"held"}
    client.release(name)
    client.set_state(name, "closed")
    # The cache saw it closed (a call ran from it) before the next state.
    cached = b.cache_stats().cached_calls

    def ran_from_cache():
        try:
            b.call(lambda: None)
        except CircuitOpenError:
            pass
        return b.cache_stats().cached_calls > cached
    wait_until(ran_from_cache)
    client.set_state(name, "open")
    assert reasons_until_cached() == {"open"}
    b.close()
