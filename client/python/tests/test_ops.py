# SPDX-License-Identifier: Apache-2.0
"""Every op of PROTOCOL.md §8 through Client, against a real cbd: results,
errors as exceptions with cbd's code, noreply, policy_conflict, threads,
the socket from $CBD_SOCKET, reconnection and timeouts."""

import threading

import pytest

from cbdclient import Client, ServerError, UnavailableError, resolve_socket
from cbdclient.connection import DEFAULT_SOCKET

NOW = 1_000_000


def test_hello(client):
    r = client.hello("pytest")
    assert (r["server"], r["protocol"]) == ("cbd", 3)


def test_get_unknown_is_initial_and_not_stored(client, name):
    r = client.get(name)
    assert r["stored"] is False
    assert r["snapshot"]["state"] == "closed" and r["snapshot"]["failure_count"] == 0


def test_sidecar_pair_with_permit(client, name):
    ctx = {"failure_threshold": 2, "break_ms": 5000, "now": NOW}
    assert client.allow(name, ctx) == {"ok": True, "allowed": True, "state": "closed"}
    client.record(name, "failure", ctx={"now": NOW + 1})
    snap = client.record(name, "failure", ctx={"now": NOW + 2})["snapshot"]
    assert (snap["state"], snap["opened_at"], snap["retry_after_ms"]) == ("open", NOW + 2, 5000)
    r = client.allow(name, {"now": NOW + 1002})
    assert (r["allowed"], r["state"], r["retry_after_ms"]) == (False, "open", 4000)
    r = client.allow(name, {"now": NOW + 5002})
    assert (r["allowed"], r["state"]) == (True, "half_open") and r["permit"]
    refused = client.allow(name, {"now": NOW + 5003})
    assert refused["allowed"] is False
    assert client.stats()["slots"] >= 1
    snap = client.record(name, "success", permit=r["permit"], duration_ms=3,
                         ctx={"now": NOW + 5004})["snapshot"]
    assert (snap["state"], snap["success_count"]) == ("half_open", 1)
    # The permit went back: the next caller gets the trial.
    assert client.allow(name, {"now": NOW + 5005})["allowed"] is True


def test_record_success_failure_duration_and_totals(client, name):
    client.record_failure(name, duration_ms=20, ctx={"slow_call_ms": 10, "trip": "rate"})
    snap = client.record_success(name, duration_ms=5)["snapshot"]
    assert snap["totals"]["failures"] == 1 and snap["totals"]["successes"] == 1
    assert snap["totals"]["slow"] == 1
    snap = client.record(name, "ignore")["snapshot"]
    assert snap["totals"]["ignored"] == 1


def test_cas(client, name):
    client.set_state(name, "open", ctx={"now": NOW, "break_ms": 1000})
    r = client.cas(name, "open", "half_open", ctx={"now": NOW + 1000})
    assert r["applied"] is True and r["snapshot"]["state"] == "half_open"
    r = client.cas(name, "open", "half_open", ctx={"now": NOW + 1001})
    assert r["applied"] is False and r["snapshot"]["state"] == "half_open"


def test_set_state_hold_ttl_reason_and_release(client, name):
    snap = client.set_state(name, "open", hold=True, reason="db failover")["snapshot"]
    assert snap["hold"]["state"] == "open" and snap["hold"]["reason"] == "db failover"
    assert snap["hold"]["until"] is None
    assert client.allow(name)["allowed"] is False
    r = client.release(name)
    assert r["released"] is True and r["snapshot"]["state"] == "half_open"
    assert client.release(name)["released"] is False
    snap = client.set_state(name, "closed", hold=True, ttl_ms=600000)["snapshot"]
    assert snap["hold"]["state"] == "closed" and snap["hold"]["until"] is not None
    with pytest.raises(ServerError) as e:
        client.set_state(name, "half_open", hold=True)
    assert e.value.code == "bad_request"


def test_slots(client, name):
    r = client.acquire_slot(name, {"half_open_max": 1})
    assert r["acquired"] is True and r["token"] and r["expires_at"]
    assert client.acquire_slot(name)["acquired"] is False
    assert client.release_slot(name, r["token"])["released"] is True
    assert client.release_slot(name, r["token"])["released"] is False
    assert client.acquire_slot(name)["acquired"] is True


def test_delete_list_stats_metrics(client, name):
    client.set_state(name, "open")
    listed = client.list(state="open")
    assert name in [c["name"] for c in listed["circuits"]] and listed["truncated"] is False
    assert name not in [c["name"] for c in client.list(state="closed")["circuits"]]
    assert client.delete(name)["existed"] is True
    assert client.delete(name)["existed"] is False
    stats = client.stats()
    assert stats["ops"]["delete"]["requests"] >= 2 and "limits" in stats
    assert "cbd_up 1" in client.metrics()["text"]


def test_errors_carry_code_and_message(client, name):
    with pytest.raises(ServerError) as e:
        client.record(name, "maybe")
    assert e.value.code == "bad_request" and "outcome" in e.value.message
    with pytest.raises(ServerError) as e:
        client.request("no_such_op")
    assert e.value.code == "unknown_op"
    with pytest.raises(ServerError) as e:
        client.get(name, {"break_ms": 0})
    assert e.value.code == "bad_request" and "break_ms" in e.value.message
    # The connection is still usable after errors.
    assert client.hello()["ok"] is True


def test_noreply_sends_without_waiting(client, name):
    before = client.stats()["noreply"]
    assert client.record_failure(name, noreply=True) is None
    assert client.record(name, "failure", noreply=True) is None
    # Replies stay paired: the next request gets its own reply.
    assert client.get(name)["snapshot"]["failure_count"] == 2
    assert client.stats()["noreply"] == before + 2


def test_policy_conflict_is_counted(client, name):
    client.record_failure(name, ctx={"break_ms": 1000})
    r = client.record_failure(name, ctx={"break_ms": 2000})
    assert r["policy_conflict"] == ["break_ms"]
    assert client.policy_conflicts >= 1 and client.last_policy_conflict == ["break_ms"]


def test_threads_share_one_client_safely(client, name):
    threads, per = 8, 100

    def work():
        for _ in range(per):
            client.record_failure(name, ctx={"failure_threshold": 1000000})

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert client.get(name)["snapshot"]["failure_count"] == threads * per


def test_socket_from_argument_env_default(cbd, monkeypatch):
    monkeypatch.delenv("CBD_SOCKET", raising=False)
    assert resolve_socket() == DEFAULT_SOCKET == "/run/cbd/cbd.sock"
    monkeypatch.setenv("CBD_SOCKET", cbd.socket)
    assert resolve_socket() == cbd.socket
    with Client(io_timeout=2.0) as c:
        assert c.hello()["ok"] is True
    assert resolve_socket("/x.sock") == "/x.sock"


def test_unreachable_raises_unavailable(tmp_path):
    c = Client(str(tmp_path / "none.sock"))
    with pytest.raises(UnavailableError) as e:
        c.hello()
    assert e.value.code == "unavailable"


def test_reconnects_after_restart(own_cbd):
    c = Client(own_cbd.socket, io_timeout=2.0)
    assert c.hello()["ok"]
    own_cbd.stop()
    with pytest.raises(UnavailableError):
        c.hello()
    own_cbd.start()
    assert c.hello()["ok"]
    # An idle connection the daemon closed is noticed before reuse.
    own_cbd.stop()
    own_cbd.start()
    assert c.hello()["ok"]
    c.close()


def test_timeout_on_a_stopped_daemon(own_cbd):
    from cbdclient import CbdTimeoutError
    # A short timeout only while cbd is stopped: a loaded machine's cbd
    # may take longer than 50 ms to answer a running one.
    c = Client(own_cbd.socket, io_timeout=5.0, connect_timeout=5.0)
    assert c.hello()["ok"]
    own_cbd.pause()
    try:
        c.io_timeout = 0.05
        with pytest.raises(CbdTimeoutError) as e:
            c.hello()
        assert e.value.code == "timeout"
    finally:
        c.io_timeout = 5.0
        own_cbd.resume()
    # The timed-out connection was dropped: the late reply is not taken
    # for the next request's.
    assert c.get("after-timeout")["snapshot"]["name"] == "after-timeout"
    c.close()
