# SPDX-License-Identifier: Apache-2.0
"""list in pages (PROTOCOL.md, list, "Pages."), against a real cbd: limit
and cursor on Client.list and AsyncClient.list, iter_circuits following the
cursor on one connection of its own, a circuit deleted between pages, a
cursor on another connection, limits out of range, a connection lost
mid-listing, and a cbd whose output bound cuts a reply of a few hundred
circuits."""

import asyncio
import itertools

import pytest

from cbdclient import AsyncClient, Client, ServerError, UnavailableError
from cbdclient.connection import LIST_LIMIT_MAX

from conftest import Daemon

# Circuits stored in the paging daemon: more than two pages of PAGE.
CIRCUITS = 750
PAGE = 300
# Of them, held open (for the state filter).
OPEN_CIRCUITS = 10
# cbd's smallest output bound used here: a list reply is cut at half of it
# (32 KiB), which a few hundred snapshots overflow.
SMALL_OUTPUT_BYTES = 65536
SMALL_OUTPUT_CIRCUITS = 600
# Bound on every test's event loop (seconds).
LOOP_BOUND = 30
# Bound on the pages of one listing read by a test (a cursor that never
# ends fails the test rather than loop).
MAX_PAGES = 100


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, LOOP_BOUND))


def connect(daemon: Daemon) -> Client:
    return Client(daemon.socket, io_timeout=5.0, connect_timeout=2.0)


def create_circuits(daemon: Daemon, names: list[str]) -> None:
    """Store names (noreply record_success lines), then wait for one reply:
    cbd answers in order, so every line before it was applied."""
    with connect(daemon) as c:
        for n in names:
            c.record_success(n, noreply=True)
        assert c.hello()["ok"]


def read_pages(client: Client, limit: int, **first: object) -> list[dict]:
    """Every page of one listing, each reply as it came."""
    pages = [client.list(limit=limit, **first)]
    while pages[-1]["cursor"] is not None:
        assert len(pages) < MAX_PAGES, "the listing does not end"
        pages.append(client.list(limit=limit, cursor=pages[-1]["cursor"]))
    return pages


def names_of(circuits) -> list[str]:
    return [c["name"] for c in circuits]


def read_names(circuits, expected: int) -> list[str]:
    """The names iter_circuits yields, reading at most one past the
    expected count (a listing that repeats itself would never end)."""
    return names_of(itertools.islice(circuits, expected + 1))


@pytest.fixture(scope="module")
def paged():
    """A cbd of this module alone holding CIRCUITS closed circuits
    (``names``) and OPEN_CIRCUITS held open (``open_names``)."""
    d = Daemon()
    d.names = [f"page-{i}" for i in range(CIRCUITS)]
    d.open_names = [f"open-{i}" for i in range(OPEN_CIRCUITS)]
    create_circuits(d, d.names)
    with connect(d) as c:
        for n in d.open_names:
            c.set_state(n, "open", hold=True)
    yield d
    d.cleanup()


@pytest.fixture(scope="module")
def small_output():
    """A cbd with max_output_bytes = SMALL_OUTPUT_BYTES holding
    SMALL_OUTPUT_CIRCUITS circuits."""
    d = Daemon(f"[cbd]\nmax_output_bytes = {SMALL_OUTPUT_BYTES}\n")
    d.names = [f"small-output-circuit-{i}" for i in range(SMALL_OUTPUT_CIRCUITS)]
    create_circuits(d, d.names)
    yield d
    d.cleanup()


def test_pages_of_300_return_every_circuit_once(paged):
    everyone = paged.names + paged.open_names
    with connect(paged) as c:
        pages = read_pages(c, PAGE)
    assert [len(p["circuits"]) for p in pages] == [PAGE, PAGE, len(everyone) - 2 * PAGE]
    for p in pages[:-1]:
        assert p["truncated"] is True and isinstance(p["cursor"], str) and p["cursor"]
    assert pages[-1]["truncated"] is False and pages[-1]["cursor"] is None
    listed = [n for p in pages for n in names_of(p["circuits"])]
    assert sorted(listed) == sorted(everyone)


def test_unpaged_list_keeps_one_reply(paged):
    with connect(paged) as c:
        reply = c.list()
    assert reply["truncated"] is False and reply["cursor"] is None
    assert sorted(names_of(reply["circuits"])) == sorted(paged.names + paged.open_names)


def test_pages_keep_the_state_filter_they_started_with(paged):
    with connect(paged) as c:
        pages = read_pages(c, 3, state="open")
    assert len(pages) == 4 and pages[-1]["cursor"] is None
    listed = [x for p in pages for x in p["circuits"]]
    assert sorted(names_of(listed)) == sorted(paged.open_names)
    assert {x["state"] for x in listed} == {"open"}


def test_iter_circuits_returns_every_circuit_once(paged):
    everyone = sorted(paged.names + paged.open_names)
    with connect(paged) as c:
        assert sorted(read_names(c.iter_circuits(), len(everyone))) == everyone
        assert sorted(read_names(c.iter_circuits(page_size=PAGE), len(everyone))) == everyone
        assert sorted(read_names(c.iter_circuits("open", page_size=4), OPEN_CIRCUITS)) == \
            sorted(paged.open_names)


def test_iter_circuits_is_not_ended_by_lists_on_its_client(paged):
    """The listing has its own connection: lists (which would end a listing
    on theirs) sent on the client between its pages change nothing."""
    with connect(paged) as c:
        listed = []
        bound = CIRCUITS + OPEN_CIRCUITS + 1
        for circuit in itertools.islice(c.iter_circuits(page_size=50), bound):
            listed.append(circuit["name"])
            if len(listed) % 50 == 1:
                assert c.list(limit=1)["cursor"] is not None
    assert sorted(listed) == sorted(paged.names + paged.open_names)


def test_circuit_deleted_between_pages_is_not_returned_after(own_cbd):
    names = [f"deleted-between-{i}" for i in range(700)]
    create_circuits(own_cbd, names)
    with connect(own_cbd) as c:
        first = c.list(limit=PAGE)
        seen = set(names_of(first["circuits"]))
        later = [n for n in names if n not in seen]
        gone = later[len(later) // 2]
        # Another op on the same connection does not end the listing.
        assert c.delete(gone)["existed"] is True
        rest = [first]
        while rest[-1]["cursor"] is not None:
            assert len(rest) < MAX_PAGES, "the listing does not end"
            rest.append(c.list(limit=PAGE, cursor=rest[-1]["cursor"]))
    listed = [n for p in rest for n in names_of(p["circuits"])]
    assert gone not in listed
    assert sorted(listed) == sorted(n for n in names if n != gone)


def test_cursor_on_another_client_or_after_another_list_is_bad_request(paged):
    with connect(paged) as c, connect(paged) as other:
        cursor = c.list(limit=PAGE)["cursor"]
        assert cursor is not None
        with pytest.raises(ServerError) as e:
            other.list(cursor=cursor)
        assert e.value.code == "bad_request"
        # Still c's: the next page comes.
        page = c.list(limit=PAGE, cursor=cursor)
        assert len(page["circuits"]) == PAGE
        # A new listing on c ends the old one: its cursor is stale.
        stale = page["cursor"]
        c.list(limit=1)
        with pytest.raises(ServerError) as e:
            c.list(cursor=stale)
        assert e.value.code == "bad_request"


def test_limit_out_of_range_is_an_error(paged):
    with connect(paged) as c:
        for limit in (0, -1, LIST_LIMIT_MAX + 1, True, 2.5, "10"):
            with pytest.raises(ValueError):
                c.list(limit=limit)
            with pytest.raises(ValueError):
                c.iter_circuits(page_size=limit)
        # cbd refuses them too (the check is not only the client's).
        for limit in (0, LIST_LIMIT_MAX + 1):
            with pytest.raises(ServerError) as e:
                c.request("list", limit=limit)
            assert e.value.code == "bad_request"
        assert len(c.list(limit=LIST_LIMIT_MAX)["circuits"]) == CIRCUITS + OPEN_CIRCUITS
        assert len(c.list(limit=1)["circuits"]) == 1


def test_connection_lost_mid_listing_fails_clearly(own_cbd):
    names = [f"lost-mid-listing-{i}" for i in range(20)]
    create_circuits(own_cbd, names)
    c = connect(own_cbd)
    cursor = c.list(limit=5)["cursor"]
    circuits = c.iter_circuits(page_size=5)
    listed = [next(circuits)["name"]]
    own_cbd.stop()
    own_cbd.start()
    # The first page was read; the second needs the lost connection.
    with pytest.raises(UnavailableError) as e:
        for circuit in itertools.islice(circuits, len(names)):
            listed.append(circuit["name"])
    assert "start the listing again" in e.value.message
    assert len(listed) == 5
    with pytest.raises(UnavailableError) as e:
        c.list(cursor=cursor)
    assert "start the listing again" in e.value.message
    # The client itself goes on, on a new connection.
    assert c.hello()["ok"]
    c.close()


def test_output_bound_truncates_one_reply_and_pages_read_all(small_output):
    with connect(small_output) as c:
        reply = c.list()
        assert reply["truncated"] is True and reply["cursor"] is not None
        assert 0 < len(reply["circuits"]) < SMALL_OUTPUT_CIRCUITS
        pages = read_pages(c, LIST_LIMIT_MAX)
        assert len(pages) > 2
        listed = [n for p in pages for n in names_of(p["circuits"])]
        assert sorted(listed) == sorted(small_output.names)
        assert sorted(read_names(c.iter_circuits(), SMALL_OUTPUT_CIRCUITS)) == \
            sorted(small_output.names)
        assert c.stats()["limits"]["list_truncated"] >= 1


def test_async_pages_and_iter_circuits(paged):
    everyone = sorted(paged.names + paged.open_names)

    async def main():
        async with AsyncClient(paged.socket, io_timeout=5.0) as c:
            pages = [await c.list(limit=PAGE)]
            while pages[-1]["cursor"] is not None and len(pages) < MAX_PAGES:
                pages.append(await c.list(limit=PAGE, cursor=pages[-1]["cursor"]))
            assert [p["truncated"] for p in pages] == [True, True, False]
            assert sorted(n for p in pages for n in names_of(p["circuits"])) == everyone
            listed = []
            async for circuit in c.iter_circuits(page_size=PAGE):
                listed.append(circuit["name"])
                if len(listed) > len(everyone):
                    break  # a listing that repeats itself: fails below
                if len(listed) % PAGE == 1:
                    # Pipelined lists on the client do not touch the listing.
                    await asyncio.gather(c.list(limit=1), c.list(limit=2))
            assert sorted(listed) == everyone
            opened = []
            async for circuit in c.iter_circuits("open", page_size=3):
                opened.append(circuit["name"])
                if len(opened) > OPEN_CIRCUITS:
                    break  # a listing that repeats itself: fails below
            assert sorted(opened) == sorted(paged.open_names)
            with pytest.raises(ValueError):
                c.iter_circuits(page_size=0)
            with pytest.raises(ValueError):
                await c.list(limit=LIST_LIMIT_MAX + 1)
            async with AsyncClient(paged.socket, io_timeout=5.0) as other:
                cursor = (await c.list(limit=PAGE))["cursor"]
                with pytest.raises(ServerError) as e:
                    await other.list(cursor=cursor)
                assert e.value.code == "bad_request"

    run(main())


def test_async_connection_lost_mid_listing_fails_clearly(own_cbd):
    names = [f"async-lost-{i}" for i in range(20)]
    create_circuits(own_cbd, names)

    async def main():
        async with AsyncClient(own_cbd.socket, io_timeout=5.0) as c:
            cursor = (await c.list(limit=5))["cursor"]
            circuits = c.iter_circuits(page_size=5)
            listed = [(await anext(circuits))["name"]]
            own_cbd.stop()
            own_cbd.start()
            with pytest.raises(UnavailableError):
                async for circuit in circuits:
                    listed.append(circuit["name"])
                    if len(listed) > len(names):
                        break  # restarted: fails below
            assert len(listed) == 5
            with pytest.raises(UnavailableError) as e:
                await c.list(cursor=cursor)
            assert "start the listing again" in e.value.message
            assert (await c.hello())["ok"]

    run(main())
