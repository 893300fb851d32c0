#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fleet-sentinel-load.sh — Redis Sentinel failing over under load (issue
# 23): a master and a replica (redis-server on loopback TCP ports), one
# Sentinel (redis-server --sentinel) watching them, and two fleet-mode
# cbds (hosts a and b) naming the Sentinel. While 8 connections (4 per
# host) stream noreply failures over 20 circuits and one connection per
# host asks allow of them, of a held circuit and of an open one, the
# master goes: twice, each time with servers and cbds of its own,
#   failover  SENTINEL FAILOVER promotes the replica (the old master is
#             alive and becomes its replica);
#   kill      the master is killed (SIGKILL); Sentinel finds it down and
#             promotes the replica.
# Then:
#   - both hosts follow the new master, re-seed it and are up (not stuck
#     degraded);
#   - every allow was answered (none hung: the longest wait is printed),
#     the held circuit was refused (held) and the open one (open) on
#     every call, and the hold and the open circuit are on the new master;
#   - no outcome was counted twice: each circuit's failures in Redis are
#     at most what was sent (those in the old master when the hosts
#     switched may be lost: their calls answered from a host's copy, or
#     written to the old master after the promotion; how many is printed,
#     with each host's backend counters);
#   - failover round: no request was answered from a host's copy
#     (local_answers 0): those never sent to the old master waited for
#     the new one (unless it was not up within redis_timeout_ms of the
#     switch: switch_timeouts, printed; then not asserted);
#   - outcomes sent after the failover are counted exactly (8 connections
#     × LINES lines, CBD_TEST_LOAD_LINES, default 2,000).
# Waits are for settled state, bounded generously; no timing is asserted.
# Skipped (77) without redis-server, redis-cli or python3.
set -u
srcdir=${CBD_SRCDIR:?}
cbd=${CBD_BINARY:?}
cbctl=${CBCTL_BINARY:?}
. "$srcdir/tests/test-lib.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || true)
for tool in redis-server redis-cli "$PY"; do
	[ -n "$tool" ] && command -v "$tool" >/dev/null 2>&1 || {
		echo "redis-server, redis-cli and python3 are needed: skipping"
		exit 77
	}
done
test_begin fleet-sentinel-load
lines=${CBD_TEST_LOAD_LINES:-2000}

# The load: `load.py stream A B STOP` streams until STOP exists; `load.py
# fixed A B LINES` sends LINES per connection. Each outcome connection
# ends with a get (its noreply lines are carried out in order before it);
# prints one JSON object: sent per circuit, allow results per host and
# circuit, the longest allow.
cat >"$tmp/load.py" <<'PY'
import json, os, socket, sys, threading, time

CIRCUITS = [f"load-{i}" for i in range(20)]
CHUNK = 10
mode, socks = sys.argv[1], sys.argv[2:4]
lock = threading.Lock()
sent = {c: 0 for c in CIRCUITS}
allows = {}
longest = [0.0]
errors = []


def line(name):
    return ('{"op":"record_failure","name":"%s","noreply":true,'
            '"ctx":{"failure_threshold":1000000000}}\n' % name).encode()


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    return s, s.makefile("rb")


def request(s, f, req):
    s.sendall((json.dumps(req) + "\n").encode())
    reply = f.readline()
    if not reply:
        raise ConnectionError("cbd closed the connection")
    return json.loads(reply)


def outcomes(path, k, count):
    try:
        s, f = connect(path)
        mine = {c: 0 for c in CIRCUITS}
        n = 0
        while (count is None and not os.path.exists(stop)) or (count is not None and n < count):
            todo = CHUNK if count is None else min(CHUNK, count - n)
            buf = b""
            for j in range(todo):
                c = CIRCUITS[(k + n + j) % len(CIRCUITS)]
                buf += line(c)
                mine[c] += 1
            s.sendall(buf)
            n += todo
            if count is None:
                time.sleep(0.01)
        r = request(s, f, {"op": "get", "name": CIRCUITS[0]})
        if not r.get("ok"):
            errors.append(r)
        with lock:
            for c, v in mine.items():
                sent[c] += v
        s.close()
    except Exception as e:
        errors.append(repr(e))


def asking(host, path):
    try:
        s, f = connect(path)
        seen = allows.setdefault(host, {})
        names = ["drill", "tripped"] + CIRCUITS[:4]
        i = 0
        while not os.path.exists(stop):
            name = names[i % len(names)]
            i += 1
            t = time.monotonic()
            r = request(s, f, {"op": "allow", "name": name})
            took = time.monotonic() - t
            with lock:
                longest[0] = max(longest[0], took)
            got = "allowed" if r.get("allowed") else r.get("reason", "error:" + json.dumps(r))
            kind = "load" if name.startswith("load-") else name
            seen.setdefault(kind, set()).add(got)
        s.close()
    except Exception as e:
        errors.append(repr(e))


# The circuits exist (with the policy the outcomes name) before any allow.
s, f = connect(socks[0])
for c in CIRCUITS:
    r = request(s, f, {"op": "record_success", "name": c,
                            "ctx": {"failure_threshold": 1000000000}})
    if not r.get("ok"):
        errors.append(r)
s.close()
threads = []
if mode == "stream":
    stop = sys.argv[4]
    count = None
    for h, path in zip("ab", socks):
        threads.append(threading.Thread(target=asking, args=(h, path)))
else:
    stop = None
    count = int(sys.argv[4])
for k in range(8):
    threads.append(threading.Thread(target=outcomes, args=(socks[k % 2], k, count)))
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"sent": sent, "allows": {h: {k: sorted(v) for k, v in d.items()}
                                            for h, d in allows.items()},
                  "longest_ms": round(longest[0] * 1000, 1), "errors": errors[:3]}))
PY

# redis_up PORT: the server on PORT answers PING.
redis_up() { [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ]; }
# The round under way: its directory ($dir), ports and processes.
dir='' master_port='' replica_port='' sentinel_port='' round_pids='' master_pid=''
# start_bg COMMAND...: run COMMAND in the background, stopped at the
# round's end (and at exit).
start_bg() {
	"$@" &
	test_started $!
	round_pids="$round_pids $!"
}
# stat HOST KEY: the value of stats member KEY (dotted) on HOST's cbd.
stat() {
	"$cbctl" -j -s "$dir/$1.sock" stats 2>/dev/null | "$PY" -c '
import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v = v[k]
print(v)' "$2" 2>/dev/null
}
on_server() { [ "$(stat "$1" backend.server)" = "$2" ] && [ "$(stat "$1" backend.health)" = up ]; }
in_replica() { [ "$(redis-cli -p "$replica_port" exists "cbd:{$1}")" = 1 ]; }
synced() { [ "$(redis-cli -p "$replica_port" get synced 2>/dev/null)" = 1 ]; }
busy() {
	[ "$(stat a backend.calls)" -gt $((calls_a + 1000)) ] &&
		[ "$(stat b backend.calls)" -gt $((calls_b + 1000)) ]
}
failover() { [ "$(redis-cli -p "$sentinel_port" sentinel failover fleet 2>&1)" = OK ]; }
# backend_stats: what each host's backend counted so far (printed).
backend_stats() {
	for host in a b; do
		echo "  host $host: $("$cbctl" -j -s "$dir/$host.sock" stats | "$PY" -c '
import json, sys
b = json.load(sys.stdin)["backend"]
print(" ".join(f"{k} {b[k]}" for k in ("calls", "timeouts", "local_answers", "degraded", "queued",
                                          "data_lost", "reseeds", "reseeded", "master_switches",
                                          "switch_timeouts")))')"
	done
}
# totals PORT: each load circuit's failures in the Redis on PORT (read
# there: a host's `get` of a closed circuit may be answered from its copy,
# which does not count the other host's outcomes since).
totals() {
	for i in $(seq 0 19); do
		echo "load-$i $(redis-cli -p "$1" hget "cbd:{load-$i}" t_failures)"
	done | "$PY" -c '
import json, sys
print(json.dumps({k: int(v) if v.isdigit() else None for k, v in (l.split() for l in sys.stdin)}))'
}
# check errors | check allows HOST KIND WANT: on the load's $summary.
check() {
	"$PY" - "$summary" "$@" <<'PY'
import json, sys
s = json.loads(sys.argv[1])
what = sys.argv[2]
if what == "errors":
    sys.exit(1 if s["errors"] else 0)
if what == "allows":
    host, kind, want = sys.argv[3:6]
    got = s["allows"].get(host, {}).get(kind)
    print(",".join(got or []))
    sys.exit(0 if got == want.split(",") else 1)
PY
}

# round MODE: servers and hosts of its own, the load, the master going
# (MODE failover or kill), the checks; everything stopped at its end.
round() {
	mode=$1
	dir=$tmp/$mode
	round_pids=
	# Three free loopback ports.
	# shellcheck disable=SC2046 # three words
	set -- $("$PY" - <<'PY'
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
PY
)
	master_port=$1 replica_port=$2 sentinel_port=$3
	mkdir -p "$dir/master" "$dir/replica" "$dir/sentinel"
	start_bg redis-server --port "$master_port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$dir/master" --loglevel warning >"$dir/master.log" 2>&1
	master_pid=$!
	start_bg redis-server --port "$replica_port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$dir/replica" --loglevel warning --replicaof 127.0.0.1 "$master_port" \
		>"$dir/replica.log" 2>&1
	until_true "$mode: the master starts" redis_up "$master_port" || return 1
	until_true "$mode: the replica starts" redis_up "$replica_port" || return 1
	redis-cli -p "$master_port" set synced 1 >/dev/null
	until_true "$mode: the replica syncs" synced || return 1
	cat >"$dir/sentinel/sentinel.conf" <<CONF
port $sentinel_port
bind 127.0.0.1
dir $dir/sentinel
loglevel warning
sentinel monitor fleet 127.0.0.1 $master_port 1
sentinel down-after-milliseconds fleet 1000
sentinel failover-timeout fleet 10000
CONF
	start_bg redis-server "$dir/sentinel/sentinel.conf" --sentinel >"$dir/sentinel.log" 2>&1
	until_true "$mode: the sentinel starts" redis_up "$sentinel_port" || return 1
	for host in a b; do
		cat >"$dir/$host.conf" <<CONF
[cbd]
backend = redis
redis = sentinel://127.0.0.1:$sentinel_port/fleet
redis_timeout_ms = 300
idle_reclaim_ms = 0
[defaults]
break_ms = 600000
CONF
		start_bg "$cbd" -c "$dir/$host.conf" -s "$dir/$host.sock" 2>"$dir/$host.log"
	done
	for host in a b; do
		until_true "$mode: host $host on the master" on_server "$host" "127.0.0.1:$master_port" ||
			{ cat "$dir/$host.log"; return 1; }
	done

	# A hold placed on host a and a circuit tripped on host b before the load.
	"$cbctl" -s "$dir/a.sock" open drill --for 10m --reason "failover drill" >/dev/null ||
		fail "$mode: cbctl open drill"
	"$cbctl" -s "$dir/b.sock" open tripped --no-hold >/dev/null ||
		fail "$mode: cbctl open tripped --no-hold"
	until_true "$mode: the hold reaches the replica" in_replica drill
	until_true "$mode: the open circuit reaches the replica" in_replica tripped

	# --- the master goes under load ---
	calls_a=$(stat a backend.calls)
	calls_b=$(stat b backend.calls)
	start_bg "$PY" "$tmp/load.py" stream "$dir/a.sock" "$dir/b.sock" "$dir/stop" \
		>"$dir/load1.json" 2>"$dir/load1.err"
	load=$!
	until_true "$mode: the load reaches Redis" busy
	echo "$mode: before the master goes:"
	backend_stats
	case $mode in
	failover) until_true "$mode: SENTINEL FAILOVER" failover ;;
	kill) kill -KILL "$master_pid" ;;
	esac
	for host in a b; do
		until_true "$mode: host $host follows the new master" \
			on_server "$host" "127.0.0.1:$replica_port" &&
			pass "$mode: host $host follows Sentinel to the new master under load and is up"
	done
	for host in a b; do
		if [ "$(stat "$host" backend.reseeds)" -ge 1 ] 2>/dev/null; then
			pass "$mode: host $host re-seeded the new master"
		else
			fail "$mode: host $host: reseeds $(stat "$host" backend.reseeds) after the failover"
		fi
	done
	# The load goes on against the new master for a while, then stops.
	calls_a=$(stat a backend.calls)
	calls_b=$(stat b backend.calls)
	until_true "$mode: the load reaches the new master" busy
	touch "$dir/stop"
	wait "$load"
	summary=$(cat "$dir/load1.json")
	echo "$mode: load across the failover: $summary"
	[ -s "$dir/load1.err" ] && { echo "load.py:"; cat "$dir/load1.err"; }
	if check errors; then
		pass "$mode: every load connection ended with its reply (longest allow: $(
			"$PY" -c 'import json,sys; print(json.loads(sys.argv[1])["longest_ms"])' "$summary") ms)"
	else
		fail "$mode: a load connection failed: $summary"
	fi
	for host in a b; do
		for want in "drill held" "tripped open" "load allowed"; do
			# shellcheck disable=SC2086 # NAME and WANT
			if got=$(check allows "$host" $want); then
				pass "$mode: host $host answered ${want#* } on every allow of ${want% *} through the failover"
			else
				fail "$mode: host $host: allow of ${want% *} answered $got (want ${want#* } only)"
			fi
		done
	done
	for name in drill tripped; do
		if in_replica "$name"; then
			pass "$mode: $name is on the new master"
		else
			fail "$mode: $name is missing on the new master"
		fi
	done
	for host in a b; do
		got=$("$cbctl" -j -s "$dir/$host.sock" get drill | "$PY" -c '
import json, sys
s = json.load(sys.stdin)["snapshot"]
print(s["state"], (s.get("hold") or {}).get("reason"))')
		if [ "$got" = "open failover drill" ]; then
			pass "$mode: host $host: the hold survived the failover"
		else
			fail "$mode: host $host: drill after the failover: $got"
		fi
	done
	# No outcome counted twice; those lost in the switch are printed.
	counted=$(totals "$replica_port")
	echo "$mode: failures in Redis after the failover: $counted"
	lost=$("$PY" - "$summary" "$counted" <<'PY'
import json, sys
sent = json.loads(sys.argv[1])["sent"]
got = json.loads(sys.argv[2])
over = [c for c in sent if got[c] is None or got[c] > sent[c]]
print(" ".join(over) if over else "ok", sum(sent.values()), sum(v or 0 for v in got.values()))
PY
)
	case $lost in
	ok*)
		# shellcheck disable=SC2086 # three words
		set -- $lost
		pass "$mode: no outcome counted twice: $3 of $2 failures sent across the failover are in Redis ($(($2 - $3)) lost in the switch)"
		;;
	*) fail "$mode: circuits with more failures in Redis than sent, or unreadable: $lost" ;;
	esac
	backend_stats
	# A SENTINEL FAILOVER leaves the old master up: no outage, so nothing
	# is answered from a host's copy (the calls the old master had when
	# the hosts switched are answered from it, not counted there).
	if [ "$mode" = failover ]; then
		for host in a b; do
			local_answers=$(stat "$host" backend.local_answers)
			switch_timeouts=$(stat "$host" backend.switch_timeouts)
			timeouts=$(stat "$host" backend.timeouts)
			if [ "$local_answers" = 0 ]; then
				pass "$mode: host $host answered no request from its copy: those never sent to the old master waited for the new one"
			elif [ "$switch_timeouts" != 0 ]; then
				echo "$mode: host $host: the new master was not up within redis_timeout_ms ($switch_timeouts switch timeouts): $local_answers local answers (not asserted)"
			elif [ "$timeouts" != 0 ]; then
				# A loaded machine: calls late past redis_timeout_ms (at the
				# switch or after it) make an outage of their own. The
				# switch itself is checked exactly by cbd-fleet-test's
				# test_sentinel_switch_keeps_unsent_requests.
				echo "$mode: host $host: $timeouts calls timed out in the round: $local_answers local answers (not asserted)"
			else
				fail "$mode: host $host answered $local_answers requests from its copy in the switch"
			fi
		done
	fi

	# --- outcomes after the failover: exact ---
	before=$(totals "$replica_port")
	"$PY" "$tmp/load.py" fixed "$dir/a.sock" "$dir/b.sock" "$lines" >"$dir/load2.json" \
		2>"$dir/load2.err" || fail "$mode: the load after the failover: $(cat "$dir/load2.err")"
	after=$(totals "$replica_port")
	got=$("$PY" - "$(cat "$dir/load2.json")" "$before" "$after" <<'PY'
import json, sys
sent = json.loads(sys.argv[1])["sent"]
before, after = json.loads(sys.argv[2]), json.loads(sys.argv[3])
bad = [f"{c}: sent {sent[c]}, counted {after[c] - before[c]}" for c in sent
       if after[c] - before[c] != sent[c]]
print("; ".join(bad) if bad else f"ok {sum(sent.values())}")
PY
)
	if [ "$got" = "ok $((8 * lines))" ]; then
		pass "$mode: after the failover every outcome is counted once: $((8 * lines)) failures from both hosts, exact per circuit"
	else
		fail "$mode: after the failover: $got"
	fi
	for host in a b; do
		if [ "$(stat "$host" backend.health)" = up ]; then
			pass "$mode: host $host is up at the end"
		else
			fail "$mode: host $host: health $(stat "$host" backend.health)"
		fi
	done
	echo "$mode: warnings logged:"
	for host in a b; do grep -h warning "$dir/$host.log" | sed "s/^/  host $host: /"; done
	for p in $round_pids; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
	return 0
}

round failover
round kill
test_end
