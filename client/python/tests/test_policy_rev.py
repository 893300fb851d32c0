# SPDX-License-Identifier: Apache-2.0
"""Protocol 3 §1 (compact snapshots) in cbdclient: snapshots with and
without ``policy`` read alike, ``policy_rev`` staleness makes the cache's
rule unknown, the ``policy`` event refreshes it, the watch and the synced
outcomes ask ``"policy": true``, ``policy=`` on the ops, and a cached
breaker's rule refreshed after a reload of a real cbd's config. Passes
against a v2 cbd too (policy in every snapshot, no policy_rev). Every wait
is a bounded poll; nothing asserts a duration."""

import json
import os
import signal

import pytest

from conftest import Daemon, wait_until

from cbdclient import Breaker, Client
from cbdclient import cache
from cbdclient.machine import Snapshot

from test_cache import accept_watch, prime, refused, stand_in_server

POLICY3 = {"failure_threshold": 3, "break_ms": 60000, "trip": "consecutive",
           "source": {"failure_threshold": "config"}}
POLICY5 = dict(POLICY3, failure_threshold=5)


def snap(rev=None, policy=None, **members):
    s = {"name": "x", "state": "closed", "failure_count": 0, "opened_at": None,
         "retry_after_ms": 0, "hold": None, "current_break_ms": 60000}
    if rev is not None:
        s["policy_rev"] = rev
    if policy is not None:
        s["policy"] = policy
    s.update(members)
    return s


def could_trip_at(own, n=10):
    """The first of n own failures that could trip by the rule (1-based),
    0 when none could; counts them on a copy of the rule's state."""
    for k in range(1, n + 1):
        if own.count("failure", 0):
            return k
    return 0


def test_snapshots_with_and_without_policy_read_alike():
    # v2: the policy in every snapshot, no rev.
    e = cache.Entry("x")
    assert e.set(snap(policy=POLICY3), reset=True)
    assert e.policy_rev is None and e.latest["policy"] == POLICY3
    assert e.own.known and e.own.threshold == 3
    # v3: compact, with the rev; the policy kept with the rev it came with
    # is filled in while the rev stays.
    e = cache.Entry("x")
    assert e.set(snap(rev=7, policy=POLICY3), reset=True)
    assert e.set(snap(rev=7, failure_count=1), reset=True)
    assert e.latest["policy"] == POLICY3 and e.latest["policy_rev"] == 7
    assert e.own.known and e.own.base_fc == 1
    # The break without current_break_ms: the kept policy's, unknown once stale.
    assert e.set({k: v for k, v in snap(rev=7).items() if k != "current_break_ms"})
    assert e.break_ms == 60000
    assert e.set({k: v for k, v in snap(rev=8).items() if k != "current_break_ms"})
    assert e.break_ms is None and e.policy is None and "policy" not in e.latest
    # Snapshot.from_reply: the break kept apart only when it is not the
    # policy's (the snapshot's, else the one given).
    assert Snapshot.from_reply(snap(policy=POLICY3)).current_break_ms == 0
    assert Snapshot.from_reply(snap(rev=7), POLICY3).current_break_ms == 0
    assert Snapshot.from_reply(snap(rev=7)).current_break_ms == 60000
    assert cache.policy_rev(snap(rev=True)) is None and cache.policy_rev(snap(rev=0)) is None


def test_a_compact_snapshot_of_another_rev_makes_the_rule_unknown():
    e = cache.Entry("x")
    assert e.set(snap(rev=7, policy=POLICY3), reset=True)
    assert could_trip_at(e.own) == 3
    # Same rev, no policy: the rule stands (base read afresh).
    assert e.set(snap(rev=7), reset=True)
    assert could_trip_at(e.own) == 3
    # Another rev, no policy: unknown, every failure could trip.
    assert e.set(snap(rev=8), reset=True)
    assert not e.own.known and could_trip_at(e.own) == 1
    # A watch reply (not a reset) with a policy of another rev: unknown too,
    # and its policy is not taken for the rule (it may be the defaults').
    e = cache.Entry("x")
    assert e.set(snap(rev=7, policy=POLICY3), reset=True)
    assert e.set(snap(rev=9, policy=POLICY5))
    assert not e.own.known
    # The reply to a synced outcome (a reset, with the policy): known again.
    assert e.set(snap(rev=9, policy=POLICY5), reset=True)
    assert e.own.known and could_trip_at(e.own) == 5


def test_policy_event_refreshes_the_rule_without_a_state_change(tmp_path):
    path = str(tmp_path / "fake.sock")
    server = stand_in_server(path, 1)
    c = cache.acquire(path)
    try:
        entry = c.watch("x")
        conn, lines, line = accept_watch(server)
        watch = json.loads(line)
        assert watch["op"] == "watch" and watch["policy"] is True
        conn.sendall(b'{"ok":true,"snapshots":[%s]}\n'
                     b'{"event":"change","snapshot":%s}\n'
                     % (json.dumps(snap(rev=7, policy=POLICY3)).encode(),
                        json.dumps(snap(rev=7, failure_count=1)).encode()))
        wait_until(lambda: c.decide(entry, 0)[2] is not None)
        assert entry.own.known and entry.own.threshold == 3
        # An unknown event is ignored; a policy event refreshes rule and
        # entry (one more event for the breakers, the state unchanged).
        conn.sendall(b'{"event":"surprise","snapshot":{"name":"x"}}\n'
                     b'{"event":"policy","snapshot":%s}\n'
                     % json.dumps(snap(rev=8, policy=POLICY5, failure_count=1)).encode())
        wait_until(lambda: c.stats().policy_events == 1)
        verdict, _, fresh, seq = c.decide(entry, 1)
        assert verdict == cache.PERMIT and seq == 2 and fresh["state"] == "closed"
        assert fresh["policy"] == POLICY5 and fresh["policy_rev"] == 8
        assert entry.own.known and entry.own.threshold == 5 and entry.own.rev == 8
        assert could_trip_at(entry.own) == 4  # one failure counted already
        assert c.stats().bad_lines == 0 and c.stats().events == 3  # change, surprise, policy
    finally:
        cache.release(c)
        server.close()


def protocol(client):
    return client.hello()["protocol"]


def test_ops_take_policy(cbd, client, name):
    v3 = protocol(client) >= 3
    rec = client.record_failure(name)["snapshot"]
    assert ("policy" in rec) != v3
    assert client.record_failure(name, policy=True)["snapshot"]["policy"]["failure_threshold"]
    got = client.get(name)["snapshot"]
    assert got["policy"]["source"]
    if v3:
        assert isinstance(got["policy_rev"], int) and got["policy_rev"] > 0
        assert rec["policy_rev"] == got["policy_rev"]
        assert "policy" not in client.get(name, policy=False)["snapshot"]
    listed = client.list(policy=True, limit=100000)["circuits"]
    assert all("policy" in s for s in listed)
    assert any(s["name"] == name for s in client.iter_circuits(policy=True))


def test_uncached_breaker_asks_for_the_policy_until_it_has_it(cbd, client, name):
    sent = []

    class Recording(Client):
        def request(self, op, **members):
            sent.append((op, members.get("policy")))
            return super().request(op, **members)

    with Recording(cbd.socket, io_timeout=2.0, connect_timeout=2.0) as c:
        b = Breaker(name, c, cached=False, failure_threshold=4)
        b.call(lambda: None)
        b.call(lambda: None)
        assert [p for op, p in sent if op == "record"] == [True, None]
        assert b._fallback_policy().failure_threshold == 4


CONF = '[circuit "{name}"]\nfailure_threshold = {n}\nbreak_ms = 600000\n'


def test_cached_rule_refreshes_after_a_reload():
    """A cached breaker learns its circuit's rule (threshold 3), the
    operator reloads a config that makes it 5: once the reload's event
    arrives the breaker syncs exactly at the 5th failure in a row, not at
    the 3rd (the old rule) nor at the 1st (a rule unknown)."""
    name = "reloaded"
    d = Daemon(CONF.format(name=name, n=3))
    try:
        with Client(d.socket, io_timeout=2.0, connect_timeout=2.0) as c:
            b = Breaker(name, c)
            prime(b)
            with pytest.raises(ConnectionError):
                b.call(boom)  # the rule unknown yet: synced, its reply reads it
            b.call(lambda: None)
            assert b._entry.own.known and b._entry.own.threshold == 3
            events = b.cache_stats().events
            with open(os.path.join(d.dir, "cbd.conf"), "w") as f:
                f.write(CONF.format(name=name, n=5))
            d.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: c.get(name)["snapshot"]["policy"]["failure_threshold"] == 5)
            wait_until(lambda: b.cache_stats().events > events)
            wait_until(lambda: b._entry.own.known and b._entry.own.threshold == 5)
            # Protocol 3 says it with a policy event (v2: a change event).
            assert (b.cache_stats().policy_events == 1) == (protocol(c) >= 3)
            b.call(lambda: None)
            syncs = b.cache_stats().syncs
            for k in range(1, 5):
                with pytest.raises(ConnectionError):
                    b.call(boom)
                assert b.cache_stats().syncs == syncs, f"failure {k} synced"
            with pytest.raises(ConnectionError):
                b.call(boom)
            assert b.cache_stats().syncs == syncs + 1
            assert b.state == "open" and refused(b) is not None
            assert c.get(name)["snapshot"]["totals"]["failures"] == 6
            b.close()
    finally:
        d.cleanup()


def boom():
    raise ConnectionError("dependency down")

