# SPDX-License-Identifier: Apache-2.0
"""The shared state-machine trace (proto/traces/state-machine.json, made
from cbd's own answers) replayed on the local store: the Python fallback
breaks exactly as cbd and libcbclient do."""

import json
import os
import pathlib

import pytest

from cbdclient.local import LocalStore
from cbdclient.machine import Policy

TRACE = pathlib.Path(os.environ.get("CBD_SRCDIR", pathlib.Path(__file__).parents[3])) \
    / "proto" / "traces" / "state-machine.json"
DOC = json.loads(TRACE.read_text())


def test_trace_format():
    assert DOC["format"] == "cbd-trace" and DOC["version"] == 1
    assert len(DOC["cases"]) > 10


@pytest.mark.parametrize("case", DOC["cases"], ids=lambda c: c["name"])
def test_trace_case(case):
    store = LocalStore()
    policy = Policy.from_ctx(case["policy"])
    for i, step in enumerate(case["steps"]):
        where = f"{case['name']}, step {i} ({step['op']})"
        want, now, op = step["expect"], step["now"], step["op"]
        if op == "allow":
            got = store.allow("c", policy, now)
            assert got["allowed"] == want["allowed"], where
            assert got["state"] == want["state"], where
            if not got["allowed"]:
                assert got["retry_after_ms"] == want["retry_after_ms"], where
            if "permit" in got:
                store.record("c", "ignore", policy, now, permit=got["permit"])
            continue
        if op == "force":
            got = store.set_state("c", step["state"], policy, now)
        else:
            got = store.record("c", op, policy, now, duration_ms=step.get("duration_ms"))
        for key in ("state", "failure_count", "success_count", "last_failure_at",
                    "opened_at", "current_break_ms"):
            assert got[key] == want[key], f"{where}: {key}"
        if "window" in want:
            window = store._circuits["c"].window
            assert window is not None, where
            assert window.counts(now) == (want["window"]["calls"],
                                          want["window"]["failures"],
                                          want["window"]["slow"]), where
