# SPDX-License-Identifier: Apache-2.0
"""AsyncClient (pipelined asyncio streams) and AsyncBreaker against a real
cbd: many requests in flight on one connection, replies matched in order,
errors, noreply, a stopped cbd, reconnection."""

import asyncio

import pytest

from cbdclient import (AsyncBreaker, AsyncClient, Breaker, CbdTimeoutError,
                       CircuitOpenError, Client, ServerError, UnavailableError)

# Bound on every test's event loop (seconds).
LOOP_BOUND = 30


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, LOOP_BOUND))


def test_pipelined_requests_match_in_order(cbd, name):
    async def main():
        async with AsyncClient(cbd.socket, io_timeout=5.0, connect_timeout=5.0) as c:
            names = [f"{name}-{i}" for i in range(200)]
            replies = await asyncio.gather(
                *(c.record_failure(n, ctx={"failure_threshold": 1000}) for n in names),
                *(c.get(n) for n in names))
            got = [r["snapshot"]["name"] for r in replies]
            assert got == names + names
            assert all(r["snapshot"]["failure_count"] == 1 for r in replies[200:])
            hello = await c.hello("aio")
            assert hello["protocol"] == 3

    run(main())


def test_every_op_is_a_coroutine(cbd, name):
    async def main():
        async with AsyncClient(cbd.socket, io_timeout=5.0, connect_timeout=5.0) as c:
            assert (await c.allow(name))["allowed"] is True
            assert (await c.record(name, "success", duration_ms=1))["snapshot"]["state"] == \
                "closed"
            slot = await c.acquire_slot(name)
            assert (await c.release_slot(name, slot["token"]))["released"] is True
            await c.set_state(name, "open", hold=True, ttl_ms=60000, reason="aio")
            assert (await c.cas(name, "open", "half_open"))["applied"] is False
            assert (await c.release(name))["released"] is True
            assert name in [x["name"] for x in (await c.list())["circuits"]]
            assert (await c.stats())["ops"]["release"]["requests"] >= 1
            assert "cbd_up" in (await c.metrics())["text"]
            assert (await c.delete(name))["existed"] is True
            assert await c.record_success(name, noreply=True) is None
            with pytest.raises(ServerError) as e:
                await c.record(name, "perhaps")
            assert e.value.code == "bad_request"
            # Still paired after an error and a noreply.
            assert (await c.get(name))["snapshot"]["success_count"] == 0

    run(main())


def test_unreachable_and_reconnect(own_cbd, tmp_path):
    async def main():
        with pytest.raises(UnavailableError):
            await AsyncClient(str(tmp_path / "none.sock")).hello()
        # A short timeout only while cbd is stopped: a loaded machine's cbd
        # may take longer than 100 ms to answer a running one.
        c = AsyncClient(own_cbd.socket, io_timeout=5.0, connect_timeout=5.0)
        assert (await c.hello())["ok"]
        own_cbd.pause()
        try:
            c.io_timeout = 0.1
            results = await asyncio.gather(c.hello(), c.get("x"), return_exceptions=True)
            assert all(isinstance(r, CbdTimeoutError) for r in results)
        finally:
            c.io_timeout = 5.0
            own_cbd.resume()
        # A fresh connection; the late replies of the old one are not taken.
        assert (await c.get("y"))["snapshot"]["name"] == "y"
        own_cbd.stop()
        with pytest.raises(UnavailableError):
            await c.hello()
        own_cbd.start()
        assert (await c.hello())["ok"]
        await c.close()

    run(main())


def test_async_breaker(cbd, name):
    b = Breaker(name, Client(cbd.socket, io_timeout=2.0), failure_threshold=2,
                break_ms=60000, fallback=lambda e: "fallback", cached=False)
    ab = AsyncBreaker(b)

    @b
    async def fetch(fail):
        await asyncio.sleep(0)
        if fail:
            raise ConnectionError("down")
        return "live"

    async def main():
        assert await fetch(False) == "live"
        for _ in range(2):
            with pytest.raises(ConnectionError):
                await ab.call(fetch.__wrapped__, True)
        assert await fetch(False) == "fallback"
        with pytest.raises(CircuitOpenError):
            await AsyncBreaker(Breaker(name, b.client)).call(fetch.__wrapped__, False)

    run(main())


def test_cancelled_call_hands_the_permit_back(cbd, name):
    c = Client(cbd.socket, io_timeout=2.0)
    c.set_state(name, "half_open")
    ab = AsyncBreaker(Breaker(name, c))

    async def main():
        running = asyncio.Event()

        async def hang():
            running.set()  # the permit is held now
            await asyncio.sleep(30)

        task = asyncio.ensure_future(ab.call(hang))
        await asyncio.wait_for(running.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    snap = c.get(name)["snapshot"]
    assert snap["state"] == "half_open" and snap["totals"]["ignored"] == 1
    assert c.acquire_slot(name)["acquired"] is True  # the trial slot is free
