-- SPDX-License-Identifier: Apache-2.0
--[[
fleet.lua — one circuit of cbd's fleet mode (backend = redis), kept in
Redis and changed only by this script, so that every circuit op is one
atomic step whichever cbd on whichever host makes it.

What it owns: the circuit's state machine and circuit semantics, mirrored
from the C core (same rule order, same edge cases):
  breaker.c        breaker_on_outcome (consecutive rule with max_gap_ms
                   chains, rate rule, slow calls, min_reporters gate,
                   break_backoff / break_max_ms), breaker_on_allow,
                   breaker_force, breaker_hold_end, breaker_retry_after_ms
                   -> on_outcome, on_allow, force, hold_end, retry_after
  window.c         the rate rule's window: count (last N calls) and time
                   (1 s buckets, minimum_calls) -> window_* below
  circuit-table.c  circuit_table_get / record_* / allow / cas / set_state /
                   release / acquire_slot / release_slot / delete, lazy hold
                   expiry (hold_expire), transition_done (every transition
                   empties the window), ext_fit_policy, totals, the
                   "created by a write" rule -> op_* below
Policy RESOLUTION is not here: cbd sends the circuit's full effective
policy with every call.

Call convention (between cbd and its own copy of this script: src/fleet.c
sends it, src/op-fleet.c reads the reply; what cbds of any version share
through Redis is in proto/PROTOCOL.md section 15). The request is
positional, not one JSON object, so that the common ops decode no JSON:
  EVALSHA <sha> 4 <P>{<name>} <P>{<name>}:slots <P>{<name>}:window <P>epoch
          <op> <channel> <name> <origin> <now> <declared> <policy>
          <reporter> <duration_ms> <token> <extra> <epoch>
  KEYS[1] hash: the circuit (fields: see load_circuit / save_circuit)
  KEYS[2] sorted set: half-open slots, member = token, score = expires_at
  KEYS[3] hash: the rate rule's window (meta fields, ring "r<i>" of a count
          window: 1 failure | 2 slow; buckets "b<i>" = "calls:failures:slow"
          of a time window)
  KEYS[4]  string: the fleet's epoch (cbd's probe makes it when missing);
           with it, ARGV[12] is the epoch the calling cbd knows, and the
           script refuses to act ("NOEPOCH ...", not an ERR: cbd takes
           Redis for away and re-seeds it) when Redis holds another or
           none: Redis lost the fleet's data (restarted empty, FLUSHALL,
           failed over to an empty replica), and nothing may be answered
           from it before it is re-seeded. Without KEYS[4] (3 keys, 11
           arguments: tests and benchmarks calling the script directly)
           nothing is checked. KEYS[4] is not under the circuit's hash
           tag: Redis Cluster would need one epoch per slot.
  ARGV[1]  op: get | success | failure | ignore | rejected | outcomes | allow | cas |
           set_state | release | acquire_slot | release_slot | delete | merge | writeback |
           restore
  ARGV[2]  channel for events
  ARGV[3]  name (for events)       ARGV[4] origin (the calling cbd's id)
  ARGV[5]  now: integer ms, or "": Redis TIME
  ARGV[6]  declared: the canonical JSON of the creating request's policy
           members ("" = none), or "-": not given (never mismatches)
  ARGV[7]  policy: the 17 members of the effective policy, one space
           apart, in this order: trip failure_threshold success_threshold
           break_ms half_open_max slot_ttl_ms max_gap_ms window window_size
           minimum_calls failure_rate slow_call_ms slow_call_rate
           min_reporters reporter_window_ms break_backoff break_max_ms
           (e.g. "consecutive 5 2 30000 1 30000 0 count 100 10 50 0 100 1
           60000 1 0"); "": not given (built-in defaults)
  ARGV[8]  reporter (for min_reporters)
  ARGV[9]  duration_ms: integer, or "": not given
  ARGV[10] token (allow, acquire_slot, release_slot), or "": none
  ARGV[11] extra: a JSON object of an op's own members, or "": none:
           count (rejected; success: that many alike), items (outcomes: see
           ops.outcomes), from/to (cas),
           state + hold (set_state), circuit +
           reseed (merge), action + state + at + known (writeback), circuit
           (restore)
Reply: a JSON string {"now", "existed", "circuit", "change", op results}
(op-fleet.c reads it). Events: when change ~= null, or a stored circuit is
deleted, PUBLISH ARGV[2] {"origin","name","now","circuit","change"}.
Op results: allow: allowed, retry_after_ms, permit; outcomes: items (its
"change" is null: each outcome's change is in its item, and published
as its own event); cas: applied;
acquire_slot: acquired, permit; release, release_slot: released; delete:
the top-level "existed"; writeback: applied. A malformed request (not 11
arguments, now or duration_ms not an integer, a policy member missing or
malformed, extra not a JSON object, unknown op, a bad state name,
allow/acquire_slot without a token, merge without a circuit, writeback
without an action or known) is an error reply ("ERR fleet.lua: ...",
naming what is wrong), checked before anything is written.

Decided here (the fleet design of issue 14 left these open):
  * "current_break_ms" in the reply is the snapshot's raw field as in
    cb_snapshot: 0 means "policy.break_ms" (breaker_break_ms); merge's
    circuit.current_break_ms is read the same way.
  * declared: the mismatch check runs only when the request carries a
    "declared" string; a request without one (e.g. delete, release_slot)
    never mismatches and creates with "". merge never mismatches: it
    applies to a circuit stored with another declared policy and keeps
    that one (a write-back after an outage must not be dropped).
  * merge with circuit.hold (an operator's hold placed on one host while
    Redis was away): placed as it was (state, since, until, by, reason)
    unless the fleet's circuit is held already; change reason "held".
  * writeback (added after the first design): an operator's release, delete or
    unheld set_state made on one host while Redis was away, written back
    after the outage. `known` is the circuit as that host knew it before
    its first such action: {opened_at, hold} (hold: null or {state, since,
    by_uid, by_user}, which identify a hold). Applied only to the circuit
    that host knew: never when none is stored (nothing is created); never
    when the fleet's circuit is held by a hold other than known.hold (an
    operator elsewhere placed it meanwhile); a release only when it is
    held by known.hold (ends it as release does, reason "writeback"); a
    delete or set_state not when the circuit is open or half_open with an
    opened_at other than known.opened_at (it tripped elsewhere since).
    set_state clears the hold as set_state does (reason "writeback", so
    that every host's log and watchers tell a write-back from an
    operator's action on that host); a
    forced open takes `at` (the operator's time) as opened_at. A deleting
    writeback publishes like delete. A lapsed hold ends first, as in
    every op.
  * acquire_slot reports a lazily expired hold as its change (and event);
    C's circuit_table_acquire_slot drops that change (it has no change out).
  * "slots" counts unexpired slots at now (C's view counts slots not yet
    pruned); allow/acquire prune expired ones (score <= now) first.
  * Expiry (PEXPIRE, refreshed by every call that finds the circuit):
    24 h; an open circuit 24 h plus its break; a held circuit never (an
    operator's hold must not vanish with the traffic). The slots zset
    expires 60 s after its last slot (hosts' clocks differ; `now` may be
    a virtual clock), and is deleted when its last slot is gone.
  * Reporters are strings (the request's "reporter"), not process ids.
  * merge ends a lapsed hold first (as every C write does); a half_open
    fleet circuit is "not open", so merge opens it (its slots stay).
  * version (added for Redis losing writes): a circuit's "ver" counts the
    calls that changed its state, opened_at or hold (a new circuit: 1);
    replies and events report it with created_at, and a cbd whose copy
    of the same circuit (created_at equal) has a higher version than a
    reply writes its copy back with restore (a lagging replica promoted).
  * merge with reseed = true (a cbd re-seeding a Redis that lost the
    fleet's data, or another server after a failover, from its copy):
    several hosts re-seed at once, so what is written never loses a hold
    or a trip whichever comes first: a hold beats no hold; between two
    holds the newer since wins (replaced whole, reason "held"; equal since:
    the stored one stays); a hold whose until has passed is not placed;
    open beats closed; between two open circuits the later opened_at wins
    (with its current_break_ms; no change reported). Without reseed (the
    merge after an outage) a stored hold or open circuit always stays.
  * The table-wide bounds of circuit-table.c (max_circuits, max_slots,
    idle reclaim) have no counterpart: Redis's memory and the expiry
    above bound the fleet instead.
Shape, for Redis's CPU (every call runs this whole chunk): the request is
positional (no JSON decoded for the common ops); each function defined at
the top is a closure made on every call, so functions are fields of `fn`
(few upvalues each), those most calls do not need are defined on first
use (fn.later), and only the running op's handler is defined; the circuit
is read with one HMGET and only changed fields are formatted and written;
the rate rule's window likewise (its meta with one HMGET, the ring entries
an outcomes fold overwrites with one more, every outcome applied in memory,
what changed written once at the end: window_save); replies and events are
string.format of one literal each.
Numbers: Lua 5.1 numbers are doubles; every value here is an integer below
2^53, exact in a double. Seconds of a time window are floor(now / 1000)
computed in doubles: exact for now below ~2^43 ms (year 2248).
--]]

local NULL = cjson.null
local DAY_MS = 86400000
local SLOTS_GRACE_MS = 60000
local COUNT_MAX = 1000000000
local REJECTED_COUNT_MAX = 1000000 -- PROTO_REJECTED_COUNT_MAX
local SUCCESS_COUNT_MAX = 1000000 -- PROTO_SUCCESS_COUNT_MAX
local WINDOW_CALLS_MAX = 4294967295 -- CB_WINDOW_CALLS_MAX: a window's calls stop there
local DURATION_MAX = 9007199254740992 -- 2^53
local BUCKET_MS = 1000
local USER_MAX = 64
local REASON_MAX = 256
local ARGC = 11

local K_CIRCUIT, K_SLOTS, K_WINDOW = KEYS[1], KEYS[2], KEYS[3]
local format, match = string.format, string.match
-- The script's functions: fields of one table rather than locals, so that
-- a closure made (every call) finds its few upvalues in a short list. The
-- table is made with a field for each function defined on every call (see
-- "function fn." below: keep the list in step), so that it is never
-- rehashed while they are defined (each rehash copies it).
local fn = {
	later = false, fail = false, int_arg = false, arg = false, encode = false, int = false,
	int_or_null = false, num_or_nil = false, load_circuit = false, field_text = false,
	save_circuit = false, new_circuit = false, ver_update = false, window_slots = false,
	window_load = false, head_flush = false, window_save = false, window_counts = false,
	break_ms = false, reporters_count = false, chain_continues = false, chain_note = false,
	totals_note = false,
	on_outcome = false,
	break_elapsed = false, on_allow = false, change_merge = false, transition_done = false,
	hold_expire = false, fit_policy = false, slots_live = false, circuit_json = false,
	change_json = false, permit_json = false, persist = false, add = false, bool_json = false,
	need_circuit = false, state_arg = false, record = false,
}
-- Functions most calls do not need are defined on first use by these
-- loaders, tried in order until one defines the function asked for.
fn.later = {}
setmetatable(fn, {
	__index = function(t, key)
		local later = rawget(t, 'later')
		for i = 1, #later do
			local define = later[i]
			if define then
				later[i] = false
				define()
				local f = rawget(t, key)
				if f ~= nil then
					return f
				end
			end
		end
		return nil
	end,
})

function fn.fail(msg)
	return redis.error_reply('ERR fleet.lua: ' .. msg)
end

---------------------------------------------------------------- request
-- Positional (see the header): no JSON to decode on the hot path.

if #KEYS >= 4 then
	-- The fleet's epoch (see the header): before anything is read or
	-- written.
	if #ARGV ~= ARGC + 1 then
		return fn.fail('the request needs ' .. (ARGC + 1) .. ' arguments with KEYS[4] (op ' ..
			'channel name origin now declared policy reporter duration_ms token extra ' ..
			'epoch), got ' .. #ARGV)
	end
	if redis.call('GET', KEYS[4]) ~= ARGV[ARGC + 1] then
		return redis.error_reply('NOEPOCH fleet.lua: redis does not hold the fleet epoch ' ..
			'this cbd knows (its data was lost): re-seed it first')
	end
elseif #ARGV ~= ARGC then
	return fn.fail('the request needs ' .. ARGC .. ' arguments (op channel name origin now ' ..
		'declared policy reporter duration_ms token extra), got ' .. #ARGV)
end
local op, channel, name, origin = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local reporter, token = ARGV[8], ARGV[10]
if token == '' then
	token = nil
end
-- declared: '-' when not given (the call never mismatches).
local declared = ARGV[6]
if declared == '-' then
	declared = nil
end

-- An integer argument ('' = not given: nil); false when malformed.
function fn.int_arg(s)
	if s == '' then
		return nil
	end
	if not match(s, '^%-?%d+$') then
		return false
	end
	return tonumber(s)
end

local duration = fn.int_arg(ARGV[9])
if duration == false then
	return fn.fail('duration_ms is not an integer: ' .. ARGV[9])
end
duration = duration or 0

-- The members of a rare op (cas, set_state, merge, writeback), a JSON
-- object in ARGV[11]; decoded only when sent.
local ext = {}
if ARGV[11] ~= '' then
	local ok, v = pcall(cjson.decode, ARGV[11])
	if not ok or type(v) ~= 'table' or v[1] ~= nil then
		return fn.fail('extra is not a JSON object')
	end
	ext = v
end

-- A member of extra, with JSON null read as absent.
function fn.arg(key)
	local v = ext[key]
	if v == NULL then
		return nil
	end
	return v
end

---------------------------------------------------------------- JSON out
-- Replies and events are built as text (string.format); this encoder is
-- for the stored hold and reporters lists: integers in full (cjson.encode
-- prints large ones with an exponent), strings as cjson.encode does.

function fn.encode(v)
	local t = type(v)
	if v == nil or v == NULL then
		return 'null'
	elseif t == 'boolean' then
		return v and 'true' or 'false'
	elseif t == 'number' then
		if v == math.floor(v) then
			return format('%.0f', v)
		end
		return format('%.17g', v)
	elseif t == 'string' then
		return cjson.encode(v)
	end
	local out = {}
	for i = 1, #v do
		out[i] = fn.encode(v[i])
	end
	return '[' .. table.concat(out, ',') .. ']'
end

-- An integer in full; a nullable one (nil: null).
function fn.int(v)
	return format('%.0f', v)
end

function fn.int_or_null(v)
	if v == nil then
		return 'null'
	end
	return format('%.0f', v)
end

---------------------------------------------------------------- clock

local now = fn.int_arg(ARGV[5])
if now == false then
	return fn.fail('now is not an integer: ' .. ARGV[5])
end
if now == nil then
	local t = redis.call('TIME')
	now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

---------------------------------------------------------------- policy
-- ARGV[7]: the effective policy, its 17 members in this order, separated
-- by one space; '' when not given (defaults: ops that do not need it,
-- such as delete or release_slot).
local P
if ARGV[7] == '' then
	P = {
		trip = 'consecutive', failure_threshold = 5, success_threshold = 2, break_ms = 30000,
		half_open_max = 1, slot_ttl_ms = 30000, max_gap_ms = 0, window = 'count',
		window_size = 100, minimum_calls = 10, failure_rate = 50, slow_call_ms = 0,
		slow_call_rate = 100, min_reporters = 1, reporter_window_ms = 60000,
		break_backoff = 1, break_max_ms = 0,
	}
else
	local trip, ft, st, bm, hom, stm, mgm, win, ws, mc, fr, scm, scr, mr, rwm, bb, bmm =
		match(ARGV[7], '^(%a+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%a+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
	if trip == nil or (trip ~= 'consecutive' and trip ~= 'rate') or
		(win ~= 'count' and win ~= 'time') then
		-- Name the first member that is wrong.
		local POLICY_KEYS = { 'trip', 'failure_threshold', 'success_threshold',
			'break_ms', 'half_open_max', 'slot_ttl_ms', 'max_gap_ms', 'window', 'window_size',
			'minimum_calls', 'failure_rate', 'slow_call_ms', 'slow_call_rate', 'min_reporters',
			'reporter_window_ms', 'break_backoff', 'break_max_ms' }
		local i = 0
		for v in string.gmatch(ARGV[7] .. ' ', '([^ ]*) ') do
			i = i + 1
			local key = POLICY_KEYS[i]
			if key == nil then
				return fn.fail('policy has more than ' .. #POLICY_KEYS .. ' members')
			end
			if (key == 'trip' and v ~= 'consecutive' and v ~= 'rate') or
				(key == 'window' and v ~= 'count' and v ~= 'time') or
				(key ~= 'trip' and key ~= 'window' and not match(v, '^%d+$')) then
				return fn.fail('policy.' .. key .. ' is malformed: ' .. v)
			end
		end
		return fn.fail('policy needs ' .. #POLICY_KEYS .. ' members, got ' .. i)
	end
	P = {
		trip = trip, failure_threshold = tonumber(ft), success_threshold = tonumber(st),
		break_ms = tonumber(bm), half_open_max = tonumber(hom), slot_ttl_ms = tonumber(stm),
		max_gap_ms = tonumber(mgm), window = win, window_size = tonumber(ws),
		minimum_calls = tonumber(mc), failure_rate = tonumber(fr), slow_call_ms = tonumber(scm),
		slow_call_rate = tonumber(scr), min_reporters = tonumber(mr),
		reporter_window_ms = tonumber(rwm), break_backoff = tonumber(bb),
		break_max_ms = tonumber(bmm),
	}
end

---------------------------------------------------------------- circuit
-- c = {state, fc, sc, lfa, oa, cbm, totals..., declared, hold, rep_n,
-- reporters, created_at}; lfa/oa nil when null (CB_TIME_NONE).

-- The circuit hash's fields, in the order load_circuit reads them.
local FIELDS = { 'state', 'fc', 'sc', 'lfa', 'oa', 'cbm', 't_successes', 't_failures',
	't_ignored', 't_slow', 't_rejected', 'declared', 'created_at', 'hold', 'rep_n', 'reporters',
	'ver' }
local F_STATE, F_LFA, F_OA, F_DECLARED, F_HOLD, F_REPORTERS, F_VER = 1, 4, 5, 12, 14, 16, 17

function fn.num_or_nil(s)
	if not s or s == '' then
		return nil
	end
	return tonumber(s)
end

function fn.load_circuit()
	local raw = redis.call('HMGET', K_CIRCUIT, unpack(FIELDS))
	if not raw[F_STATE] then
		for i = 2, #FIELDS do
			if raw[i] then
				break
			end
			if i == #FIELDS then
				return nil
			end
		end
	end
	local c = {
		state = raw[1] or nil,
		fc = tonumber(raw[2]) or 0,
		sc = tonumber(raw[3]) or 0,
		lfa = fn.num_or_nil(raw[4]),
		oa = fn.num_or_nil(raw[5]),
		cbm = tonumber(raw[6]) or 0,
		t_successes = tonumber(raw[7]) or 0,
		t_failures = tonumber(raw[8]) or 0,
		t_ignored = tonumber(raw[9]) or 0,
		t_slow = tonumber(raw[10]) or 0,
		t_rejected = tonumber(raw[11]) or 0,
		declared = raw[12] or '',
		created_at = tonumber(raw[13]) or now,
		rep_n = tonumber(raw[15]) or 0,
		reporters = {},
		ver = tonumber(raw[F_VER]) or 0,
		raw = raw, -- as read: save_circuit writes only what changed
	}
	local hold = raw[F_HOLD]
	if hold and hold ~= '' then
		local h = cjson.decode(hold)
		c.hold = {
			state = h[1],
			since = h[2],
			["until"] = h[3] ~= NULL and h[3] or nil,
			by_uid = h[4],
			by_user = h[5],
			reason = h[6] ~= NULL and h[6] or nil,
		}
	end
	if raw[F_REPORTERS] and raw[F_REPORTERS] ~= '' then
		c.reporters = cjson.decode(raw[F_REPORTERS])
	end
	-- The values as loaded, by field (hold: the table itself, which ops
	-- replace rather than change; reporters change in place).
	c.old = { c.state, c.fc, c.sc, c.lfa, c.oa, c.cbm, c.t_successes, c.t_failures, c.t_ignored,
		c.t_slow, c.t_rejected, c.declared, c.created_at, c.hold, c.rep_n, nil, c.ver }
	return c
end

-- The stored text of field i of c, whose value is v.
function fn.field_text(c, i, v)
	if i == F_STATE or i == F_DECLARED then
		return v
	elseif i == F_LFA or i == F_OA then
		return v and fn.int(v) or ''
	elseif i == F_HOLD then
		if v == nil then
			return ''
		end
		return fn.encode({ v.state, v.since, v['until'] or NULL, v.by_uid, v.by_user,
			v.reason or NULL })
	elseif i == F_REPORTERS then
		return c.rep_n > 1 and fn.encode(v) or ''
	end
	return fn.int(v)
end

-- Write the fields whose stored text changed since load_circuit read them
-- (every field of a new circuit): a failure on a closed circuit changes
-- three of sixteen. A value equal to the one loaded is not formatted.
function fn.save_circuit(c)
	local raw, old = c.raw, c.old
	local vals = { c.state, c.fc, c.sc, c.lfa, c.oa, c.cbm, c.t_successes, c.t_failures,
		c.t_ignored, c.t_slow, c.t_rejected, c.declared, c.created_at, c.hold, c.rep_n,
		c.reporters, c.ver }
	local changed, n = {}, 0
	for i = 1, #FIELDS do
		local v = vals[i]
		if old == nil or not raw[i] or v ~= old[i] or i == F_REPORTERS then
			local text = fn.field_text(c, i, v)
			if old == nil or raw[i] ~= text then
				changed[n + 1] = FIELDS[i]
				changed[n + 2] = text
				n = n + 2
			end
		end
	end
	if n > 0 then
		redis.call('HSET', K_CIRCUIT, unpack(changed))
	end
	c.raw, c.old = nil, nil
end

function fn.new_circuit(declared)
	return {
		state = 'closed', fc = 0, sc = 0, lfa = nil, oa = nil, cbm = 0,
		t_successes = 0, t_failures = 0, t_ignored = 0, t_slow = 0, t_rejected = 0,
		declared = declared or '', created_at = now, rep_n = 0, reporters = {}, ver = 0,
	}
end

-- The circuit's version (see the header): one more when its state,
-- opened_at or hold changed in this call (a new circuit: 1); restore sets
-- it (ver_set).
function fn.ver_update(c)
	local old = c.old
	if c.ver_set then
		c.ver = c.ver_set
	elseif old == nil or c.state ~= old[F_STATE] or c.oa ~= old[F_OA] or c.hold ~= old[F_HOLD] then
		c.ver = c.ver + 1
	end
end

---------------------------------------------------------------- window.c
-- The window is read and written through a cache (issue 24: a fold of
-- outcomes must not cost a round trip per outcome): window_load reads the
-- meta fields, a ring entry or bucket is read on first use (the ring
-- entries a fold will overwrite with one HMGET), every change is made in
-- memory, and window_save writes what changed at the end of the call, once
-- (one HSET, one HDEL). A transition's DEL is made at once.

local window -- the window's meta, loaded on first use; false: none stored
-- Window adds still to come in this call (an outcomes fold: its successes
-- and failures): how many ring entries a count window reads at once.
local window_ahead = 1
local WINDOW_META = { 'kind', 'slots', 'next', 'last', 'calls', 'failures', 'slow' }
-- Most fields one HMGET reads (unpack's stack).
local WINDOW_READ_MAX = 512
-- A count window's ring entry names by index ('r' .. i formats a number).
local ring_names = {}

function fn.window_slots(kind, size)
	if kind == 'count' then
		return size
	end
	return math.floor((size + BUCKET_MS - 1) / BUCKET_MS)
end

function fn.window_load()
	if window ~= nil then
		return window
	end
	-- Without the rate rule there is seldom a window: EXISTS costs Redis
	-- less than an HMGET of seven missing fields.
	if P.trip ~= 'rate' and redis.call('EXISTS', K_WINDOW) == 0 then
		window = false
		return window
	end
	local raw = redis.call('HMGET', K_WINDOW, unpack(WINDOW_META))
	if not raw[1] then
		window = false
		return window
	end
	-- f: ring entry or bucket -> its text now (false: none); orig: as
	-- stored, for those read; empty: nothing stored but the meta (after a
	-- DEL); meta: the meta fields as stored (nil: none stored); head: the
	-- time window's newest bucket as numbers {field, calls, failures, slow}.
	window = {
		kind = raw[1],
		slots = tonumber(raw[2]),
		next = tonumber(raw[3]),
		last = fn.num_or_nil(raw[4]),
		calls = tonumber(raw[5]),
		failures = tonumber(raw[6]),
		slow = tonumber(raw[7]),
		dirty = false,
		f = {}, orig = {}, empty = false, meta = raw, head = nil,
	}
	return window
end

-- The time window's newest bucket, as text in f.
function fn.head_flush(w)
	local h = w.head
	if h ~= nil then
		w.f[h[1]] = h[2] .. ':' .. h[3] .. ':' .. h[4]
		w.head = nil
	end
end

-- Write what changed since window_load (see above): the meta fields and
-- entries whose text changed (an entry never read: always written).
function fn.window_save()
	local w = window
	if not w or not w.dirty then
		return
	end
	fn.head_flush(w)
	local set, n, del, nd = {}, 0, {}, 0
	local meta = w.meta
	local vals = { w.kind, fn.int(w.slots), fn.int(w.next), w.last and fn.int(w.last) or '',
		fn.int(w.calls), fn.int(w.failures), fn.int(w.slow) }
	for i = 1, #WINDOW_META do
		if meta == nil or meta[i] ~= vals[i] then
			set[n + 1] = WINDOW_META[i]
			set[n + 2] = vals[i]
			n = n + 2
		end
	end
	local orig, empty = w.orig, w.empty
	for field, v in pairs(w.f) do
		local o = orig[field]
		if o == nil and empty then
			o = false
		end
		if o == nil or o ~= v then
			if v then
				set[n + 1] = field
				set[n + 2] = v
				n = n + 2
			elseif o ~= false then
				nd = nd + 1
				del[nd] = field
			end
		end
	end
	if n > 0 then
		redis.call('HSET', K_WINDOW, unpack(set, 1, n))
	end
	if nd > 0 then
		redis.call('HDEL', K_WINDOW, unpack(del, 1, nd))
	end
	w.dirty = false
end

-- Defined on first use (the rate rule's window changing).
fn.later[#fn.later + 1] = function()
	-- After the window's DEL: nothing stored.
	function fn.window_emptied(w)
		w.f, w.orig, w.empty, w.meta, w.head = {}, {}, true, nil, nil
	end

	-- window_init / window_reset: an empty window of this kind and slots.
	function fn.window_new(kind, slots)
		redis.call('DEL', K_WINDOW)
		window = { kind = kind, slots = slots, next = 0, last = nil, calls = 0, failures = 0,
			slow = 0, dirty = true, f = {}, orig = {}, empty = true, meta = nil, head = nil }
	end

	function fn.window_drop()
		redis.call('DEL', K_WINDOW)
		window = false
	end

	-- window_reset (every transition empties the window).
	function fn.window_reset()
		if fn.window_load() then
			fn.window_new(window.kind, window.slots)
		end
	end

	-- Read the fields of list[1..n] not known yet (HMGETs of at most
	-- WINDOW_READ_MAX).
	function fn.window_read(w, list, n)
		local f, orig = w.f, w.orig
		if w.empty then
			return
		end
		local ask, m = {}, 0
		for i = 1, n do
			if f[list[i]] == nil then
				m = m + 1
				ask[m] = list[i]
			end
		end
		local from = 1
		while from <= m do
			local to = math.min(m, from + WINDOW_READ_MAX - 1)
			local raw = redis.call('HMGET', K_WINDOW, unpack(ask, from, to))
			for i = from, to do
				local v = raw[i - from + 1]
				f[ask[i]] = v
				orig[ask[i]] = v
			end
			from = to + 1
		end
	end

	-- count_add: the ring of the last `slots` calls. The entry at next is
	-- read (with the ones the fold's next adds overwrite) only when the ring
	-- is full: until then it is empty.
	function fn.count_add(w, failure, slow)
		local field = ring_names[w.next]
		if field == nil then
			field = 'r' .. w.next
			ring_names[w.next] = field
		end
		if w.calls == w.slots then
			if w.f[field] == nil and not w.empty then
				local ahead = math.min(math.max(window_ahead, 1), w.slots, WINDOW_READ_MAX)
				local list = {}
				for j = 0, ahead - 1 do
					local i = (w.next + j) % w.slots
					local name = ring_names[i]
					if name == nil then
						name = 'r' .. i
						ring_names[i] = name
					end
					list[j + 1] = name
				end
				fn.window_read(w, list, ahead)
			end
			local old = w.f[field]
			old = old and tonumber(old) or 0
			w.calls = w.calls - 1
			if old % 2 == 1 then
				w.failures = w.failures - 1
			end
			if old >= 2 then
				w.slow = w.slow - 1
			end
		end
		local v = (failure and 1 or 0) + (slow and 2 or 0)
		w.f[field] = v ~= 0 and tostring(v)
		window_ahead = window_ahead - 1
		w.next = (w.next + 1) % w.slots
		w.calls = w.calls + 1
		w.failures = w.failures + (failure and 1 or 0)
		w.slow = w.slow + (slow and 1 or 0)
		w.dirty = true
	end

	function fn.second_of(t)
		return math.floor(t / BUCKET_MS)
	end

	function fn.bucket_field(w, second)
		return 'b' .. (second % w.slots)
	end

	-- time_advance: move the head to `second`, emptying the buckets that fall
	-- out. When the gap covers the whole ring every bucket falls out: the
	-- window is then empty (C subtracts each bucket and reaches zero too).
	function fn.time_advance(w, second)
		if w.last ~= nil and second <= w.last then
			return
		end
		fn.head_flush(w)
		if w.last == nil or second - w.last >= w.slots then
			if w.calls ~= 0 or w.failures ~= 0 or w.slow ~= 0 then
				redis.call('DEL', K_WINDOW)
				fn.window_emptied(w)
			end
			w.calls, w.failures, w.slow = 0, 0, 0
		else
			local list, n = {}, 0
			for s = w.last + 1, second do
				n = n + 1
				list[n] = fn.bucket_field(w, s)
			end
			fn.window_read(w, list, n)
			local f = w.f
			for i = 1, n do
				local b = f[list[i]]
				if b then
					local bc, bf, bs = string.match(b, '^(%d+):(%d+):(%d+)$')
					w.calls = w.calls - tonumber(bc)
					w.failures = w.failures - tonumber(bf)
					w.slow = w.slow - tonumber(bs)
				end
				-- Known empty from here on (an entry never read that
				-- stays false is deleted by window_save, as before).
				f[list[i]] = false
			end
		end
		w.last = second
		w.dirty = true
	end

	function fn.window_add(failure, slow)
		local w = window
		if w.kind == 'count' then
			fn.count_add(w, failure, slow)
			return
		end
		fn.time_advance(w, fn.second_of(now))
		-- A clock behind the newest bucket counts in the newest bucket.
		-- (time_advance flushes the head when it moves: a head is the
		-- bucket of w.last.)
		local h = w.head
		if h == nil then
			local field = fn.bucket_field(w, w.last)
			fn.window_read(w, { field }, 1)
			local b = w.f[field]
			local bc, bf, bs = 0, 0, 0
			if b then
				bc, bf, bs = string.match(b, '^(%d+):(%d+):(%d+)$')
				bc, bf, bs = tonumber(bc), tonumber(bf), tonumber(bs)
			end
			h = { field, bc, bf, bs }
			w.head = h
		end
		if w.calls >= WINDOW_CALLS_MAX then
			return
		end
		h[2] = h[2] + 1
		h[3] = h[3] + (failure and 1 or 0)
		h[4] = h[4] + (slow and 1 or 0)
		w.calls = w.calls + 1
		w.failures = w.failures + (failure and 1 or 0)
		w.slow = w.slow + (slow and 1 or 0)
		w.dirty = true
	end
end

-- window_counts: what the window holds at now (drops expired buckets).
function fn.window_counts()
	local w = fn.window_load()
	if not w then
		return nil
	end
	if w.kind == 'time' and w.last ~= nil then
		fn.time_advance(w, fn.second_of(now))
	end
	return w
end

---------------------------------------------------------------- breaker.c

function fn.break_ms(c)
	if c.cbm > 0 then
		return c.cbm
	end
	return P.break_ms
end

-- breaker_reporters_count: distinct reporters with now - at <= window.
function fn.reporters_count(c)
	local n = 0
	if c.rep_n <= 1 then
		return 0
	end
	for _, r in ipairs(c.reporters) do
		if now - r[2] <= P.reporter_window_ms then
			n = n + 1
		end
	end
	return n
end

function fn.chain_continues(c)
	if P.max_gap_ms <= 0 or c.lfa == nil then
		return true
	end
	return now - c.lfa <= P.max_gap_ms
end

-- An outcome in the circuit's totals.
function fn.totals_note(c, failure, slow)
	if slow then
		c.t_slow = c.t_slow + 1
	end
	if failure then
		c.t_failures = c.t_failures + 1
	else
		c.t_successes = c.t_successes + 1
	end
end

-- A closed circuit's consecutive count after an outcome: a failure
-- continues the chain (or starts one past max_gap_ms), a success ends it.
function fn.chain_note(c, failure)
	if failure then
		if fn.chain_continues(c) then
			c.fc = c.fc + 1
		else
			c.fc = 1
		end
		c.lfa = now
	else
		c.fc = 0
	end
end

-- breaker_on_outcome, with `trip` / `threshold` as record_outcome passes
-- them (a held circuit: consecutive, COUNT_MAX, no window).
function fn.on_outcome(c, failure, slow, trip, threshold, use_window, gated)
	local bad = failure or (slow and trip == 'rate' and P.slow_call_ms > 0)
	if bad and gated then
		fn.reporters_note(c, reporter)
	end
	if c.state == 'closed' then
		fn.chain_note(c, failure)
		local trips
		if trip == 'rate' then
			trips = fn.rate_trips(failure, slow, use_window)
		else
			trips = failure and c.fc >= threshold
		end
		if not trips or not fn.reporters_allow_trip(c, gated) then
			return nil
		end
		fn.trip_open(c)
		return trip == 'rate' and 'failure_rate' or 'failure_threshold'
	elseif c.state == 'half_open' then
		if bad then
			fn.trial_failed(c)
			return 'trial_failed'
		end
		c.sc = c.sc + 1
		if c.sc < P.success_threshold then
			return nil
		end
		fn.close_after_trials(c)
		return 'trial_succeeded'
	end
	-- open: a straggler never extends the break window.
	if failure then
		c.lfa = now
	end
	return nil
end

function fn.break_elapsed(c)
	if c.state ~= 'open' then
		return false
	end
	if c.oa == nil then
		return true
	end
	return now - c.oa >= fn.break_ms(c)
end

function fn.on_allow(c)
	if not fn.break_elapsed(c) then
		return nil
	end
	fn.force(c, 'half_open')
	return 'break_elapsed'
end

-- Defined on first use (transitions, reporters, the rate rule, retry).
fn.later[#fn.later + 1] = function()
	function fn.trip_open(c)
		c.state = 'open'
		c.oa = now
		c.sc = 0
	end

	function fn.trial_failed(c)
		if P.break_backoff > 1 then
			local grown = fn.break_ms(c)
			if grown > math.floor(DURATION_MAX / P.break_backoff) then
				grown = DURATION_MAX
			else
				grown = grown * P.break_backoff
			end
			if P.break_max_ms > 0 and grown > P.break_max_ms then
				grown = P.break_max_ms
			end
			c.cbm = grown
		end
		fn.trip_open(c)
		c.lfa = now
	end

	function fn.close_after_trials(c)
		c.state = 'closed'
		c.fc = 0
		c.sc = 0
		c.oa = nil
		c.cbm = 0
	end

	-- reporters_note: refresh id's entry, or let the oldest make room. The
	-- list holds at most rep_n entries (C's empty slots are the missing ones;
	-- an empty slot is always taken before the oldest entry).
	function fn.reporters_note(c, id)
		local oldest = nil
		for i, r in ipairs(c.reporters) do
			if r[1] == id then
				if now > r[2] then
					r[2] = now
				end
				return
			end
			if oldest == nil or r[2] < c.reporters[oldest][2] then
				oldest = i
			end
		end
		if #c.reporters < c.rep_n then
			c.reporters[#c.reporters + 1] = { id, now }
		else
			c.reporters[oldest] = { id, now }
		end
	end

	function fn.reporters_allow_trip(c, gated)
		if P.min_reporters <= 1 or not gated then
			return true
		end
		return fn.reporters_count(c) >= P.min_reporters
	end

	function fn.rate_trips(failure, slow, use_window)
		local slow_rule = P.slow_call_ms > 0
		if not use_window then
			return false
		end
		fn.window_add(failure, slow_rule and slow)
		local n = fn.window_counts()
		if n.calls == 0 or n.calls < P.minimum_calls then
			return false
		end
		-- Integers only, as window.c: a division (29 / 100 * 100 is
		-- 28.999... in Lua) would miss the exact boundary
		-- (check_fleet_script's rate_boundaries_exact).
		return n.failures * 100 >= P.failure_rate * n.calls or
			(slow_rule and n.slow * 100 >= P.slow_call_rate * n.calls)
	end

	function fn.force(c, state)
		c.state = state
		if state == 'closed' then
			c.fc = 0
			c.sc = 0
			c.oa = nil
			c.cbm = 0
		elseif state == 'open' then
			c.oa = now
			c.sc = 0
		else
			c.sc = 0
		end
	end

	-- breaker_retry_after_ms
	function fn.breaker_retry_after(c)
		if c.state ~= 'open' or fn.break_elapsed(c) then
			return 0
		end
		local elapsed = 0
		if now > c.oa then
			elapsed = now - c.oa
		end
		return fn.break_ms(c) - elapsed
	end

	function fn.hold_end(c, held)
		if held == 'open' then
			fn.force(c, 'half_open')
		else
			fn.force(c, 'closed')
		end
		return 'hold_expired'
	end
end

---------------------------------------------------------------- circuit-table.c

local change = nil -- {from, to, reason}

-- change_merge: a later change within the call keeps the first `from`.
function fn.change_merge(from, to, reason)
	if reason == nil then
		return
	end
	if change == nil then
		change = { from = from, to = to, reason = reason }
	else
		change.to = to
		change.reason = reason
	end
end

-- transition_done: every transition empties the window.
function fn.transition_done(c, from)
	if c.state ~= from then
		fn.window_reset()
	end
end

function fn.hold_expire(c)
	local h = c.hold
	if h == nil or h['until'] == nil or now < h['until'] then
		return false
	end
	local from = c.state
	local reason = fn.hold_end(c, h.state)
	fn.transition_done(c, from)
	c.hold = nil
	fn.change_merge(from, c.state, reason)
	return true
end

-- ext_fit_policy: a window for the rate rule (made anew when its shape
-- changed), a reporters list for min_reporters > 1.
function fn.fit_policy(c)
	local rate = P.trip == 'rate'
	local w = fn.window_load()
	local slots = fn.window_slots(P.window, P.window_size)
	if w and (not rate or w.kind ~= P.window or w.slots ~= slots) then
		fn.window_drop()
	end
	if rate and not window then
		fn.window_new(P.window, slots)
	end
	if P.min_reporters > 1 then
		if c.rep_n ~= P.min_reporters then
			c.rep_n = P.min_reporters
			c.reporters = {}
		end
	elseif c.rep_n ~= 0 or next(c.reporters) ~= nil then
		-- (Not a new empty list on every outcome of a fold.)
		c.rep_n = 0
		c.reporters = {}
	end
end

-- Defined on first use (holds placed, slots taken, refusals).
fn.later[#fn.later + 1] = function()
	-- text_copy: at most max bytes, cut on a UTF-8 boundary.
	function fn.text_cut(text, max)
		if text == nil then
			return nil
		end
		local len = #text
		if len > max then
			len = max
			while len > 0 do
				local b = string.byte(text, len + 1)
				if b < 0x80 or b >= 0xc0 then
					break
				end
				len = len - 1
			end
		end
		return string.sub(text, 1, len)
	end

	function fn.slots_prune()
		redis.call('ZREMRANGEBYSCORE', K_SLOTS, '-inf', fn.int(now))
	end

	-- slot_take: a slot with token if fewer than half_open_max are held.
	function fn.slot_take(token)
		fn.slots_prune()
		if redis.call('ZCARD', K_SLOTS) >= P.half_open_max then
			return nil
		end
		local expires_at = now + P.slot_ttl_ms
		redis.call('ZADD', K_SLOTS, expires_at, token)
		return { token = token, expires_at = expires_at }
	end

	-- circuit_table_retry_after
	function fn.retry_after(c)
		local h = c.hold
		if h and h.state == 'open' then
			if h['until'] == nil then
				return P.break_ms
			end
			if now >= h['until'] then
				return 0
			end
			if now > h.since then
				return h['until'] - now
			end
			return h['until'] - h.since
		end
		return fn.breaker_retry_after(c)
	end
end

---------------------------------------------------------------- reply
-- Built as text with string.format: one call per object, members in a
-- fixed order (the JSON encoder's of earlier versions, byte for byte),
-- integers in full ('%.0f': every value is an integer below 2^53).

-- The slots zset's last slot, read by slots_live for persist (nothing
-- changes the slots between the two).
local slots_last = nil

-- Unexpired slots at now (one ZRANGE when there are none).
function fn.slots_live()
	slots_last = redis.call('ZRANGE', K_SLOTS, -1, -1, 'WITHSCORES')
	if #slots_last == 0 or tonumber(slots_last[2]) <= now then
		return 0
	end
	return redis.call('ZCOUNT', K_SLOTS, '(' .. fn.int(now), '+inf')
end

function fn.circuit_json(c)
	if c == nil then
		return 'null'
	end
	local hold = 'null'
	if c.hold then
		local h = c.hold
		hold = format('{"state":%s,"since":%s,"until":%s,"by_uid":%s,"by_user":%s,"reason":%s}',
			fn.encode(h.state), fn.encode(h.since), fn.encode(h['until']), fn.encode(h.by_uid),
			fn.encode(h.by_user), fn.encode(h.reason))
	end
	local w = fn.window_counts()
	local wj = 'null'
	if w then
		wj = format('{"calls":%.0f,"failures":%.0f,"slow":%.0f}', w.calls, w.failures, w.slow)
	end
	local declared_json = '""'
	if c.declared ~= '' then
		declared_json = cjson.encode(c.declared)
	end
	-- One literal (a concatenation would run on every call).
	return format('{"state":"%s","failure_count":%.0f,"success_count":%.0f,"last_failure_at":%s,"opened_at":%s,"current_break_ms":%.0f,"totals":{"successes":%.0f,"failures":%.0f,"ignored":%.0f,"slow":%.0f,"rejected":%.0f},"hold":%s,"declared":%s,"slots":%.0f,"window":%s,"reporters":%.0f,"version":%.0f,"created_at":%.0f}',
		c.state, c.fc, c.sc, fn.int_or_null(c.lfa), fn.int_or_null(c.oa), c.cbm, c.t_successes,
		c.t_failures, c.t_ignored, c.t_slow, c.t_rejected, hold, declared_json, fn.slots_live(), wj,
		fn.reporters_count(c), c.ver, c.created_at)
end

function fn.change_json()
	if change == nil then
		return 'null'
	end
	return format('{"from":"%s","to":"%s","reason":"%s"}', change.from, change.to, change.reason)
end

function fn.permit_json(slot)
	if slot == nil then
		return 'null'
	end
	return format('{"token":%s,"expires_at":%.0f}', cjson.encode(slot.token), slot.expires_at)
end

-- Store c and give every key its expiry (see the header).
function fn.persist(c)
	fn.save_circuit(c)
	fn.window_save()
	if c.hold then
		redis.call('PERSIST', K_CIRCUIT)
		if window then
			redis.call('PERSIST', K_WINDOW)
		end
	else
		local ttl = DAY_MS
		if c.state == 'open' then
			ttl = ttl + fn.break_ms(c)
		end
		redis.call('PEXPIRE', K_CIRCUIT, ttl)
		if window then
			redis.call('PEXPIRE', K_WINDOW, ttl)
		end
	end
	local last = slots_last or redis.call('ZRANGE', K_SLOTS, -1, -1, 'WITHSCORES')
	if #last > 0 then
		local left = tonumber(last[2]) - now
		if left <= 0 then
			redis.call('DEL', K_SLOTS)
		else
			redis.call('PEXPIRE', K_SLOTS, left + SLOTS_GRACE_MS)
		end
	end
end

---------------------------------------------------------------- ops

local stored = fn.load_circuit()
local existed = stored ~= nil

-- merge carries a snapshot, not a policy decision: it never mismatches
-- (a write-back must not be lost because another cbd created the circuit
-- with another policy) and keeps the stored declared.
if stored and declared ~= nil and stored.declared ~= declared and op ~= 'merge' then
	return format('{"mismatch":true,"declared":%s,"now":%.0f}', cjson.encode(stored.declared),
		now)
end

local c = stored
local deleted = false -- a writeback deleted the circuit
local extra = {} -- op results as JSON members, appended to the reply in order

function fn.add(key, json)
	extra[#extra + 1] = ',"' .. key .. '":' .. json
end

function fn.bool_json(b)
	return b and 'true' or 'false'
end

function fn.need_circuit()
	if c == nil then
		c = fn.new_circuit(declared)
	end
	return c
end

function fn.state_arg(key)
	local s = fn.arg(key)
	if s ~= 'closed' and s ~= 'open' and s ~= 'half_open' then
		return nil
	end
	return s
end

-- record_outcome: 0 ignore, 1 success, 2 failure.
function fn.record(outcome)
	if outcome == 0 and c == nil then
		return
	end
	fn.need_circuit()
	fn.hold_expire(c)
	if outcome == 0 then
		c.t_ignored = c.t_ignored + 1
		return
	end
	fn.fit_policy(c)
	local failure = outcome == 2
	local slow = P.slow_call_ms > 0 and duration >= P.slow_call_ms
	fn.totals_note(c, failure, slow)
	local trip, threshold, use_window = P.trip, P.failure_threshold, P.trip == 'rate'
	-- A held circuit counts its calls but no rule moves it.
	if c.hold then
		trip, threshold, use_window = 'consecutive', COUNT_MAX, false
	end
	local from = c.state
	local reason = fn.on_outcome(c, failure, slow, trip, threshold, use_window, c.rep_n > 1)
	fn.change_merge(from, c.state, reason)
	fn.transition_done(c, from)
end

-- The op handlers: only the one this call runs is defined (a closure made
-- per call costs Redis CPU).
local ops = {}

if op == 'get' then
	function ops.get()
		if c ~= nil then
			fn.hold_expire(c)
		end
	end
end

-- Successes alike in bulk (record_success's count, a fold's runs):
-- breaker.c's breaker_on_successes with circuit-table.c's record_outcome
-- around it. Defined on first use (most success calls are one success).
fn.later[#fn.later + 1] = function()
	-- The rate rule's test of the window as it is.
	function fn.rate_reached(w)
		local calls = w.calls
		return calls ~= 0 and calls >= P.minimum_calls and
			(w.failures * 100 >= P.failure_rate * calls or
				(P.slow_call_ms > 0 and w.slow * 100 >= P.slow_call_rate * calls))
	end

	-- successes_safe: how many successes may be added, after one that did
	-- not trip, before one more might (that one is added and tested
	-- alone); `left` when none of them can trip.
	function fn.successes_safe(w, slow, left)
		local calls, min = w.calls, P.minimum_calls
		if calls < min then
			if (w.kind == 'count' and min > w.slots) or calls >= WINDOW_CALLS_MAX then
				return left
			end
			return math.min(min - calls - 1, left)
		end
		if not slow then
			return left
		end
		if w.kind == 'count' then
			return 0
		end
		local rate = P.slow_call_rate
		if rate >= 100 or calls >= WINDOW_CALLS_MAX then
			return left
		end
		local need = rate * calls - w.slow * 100
		need = math.floor((need + (100 - rate) - 1) / (100 - rate))
		return math.min(need - 1, left)
	end

	-- window_add_run: j successes alike (window.c).
	function fn.window_add_run(w, slow, j)
		if j <= 0 then
			return
		end
		if w.kind == 'count' then
			local slots = w.slots
			if j >= slots then
				-- Every entry falls out: the ring holds only these (none
				-- read).
				local v = slow and '2' or false
				for i = 0, slots - 1 do
					local name = ring_names[i]
					if name == nil then
						name = 'r' .. i
						ring_names[i] = name
					end
					w.f[name] = v
				end
				w.calls, w.failures, w.slow = slots, 0, slow and slots or 0
				w.next = (w.next + j) % slots
				window_ahead = window_ahead - j
				w.dirty = true
				return
			end
			for _ = 1, j do
				fn.count_add(w, false, slow)
			end
			return
		end
		fn.window_add(false, slow)
		local h = w.head
		local k = math.min(j - 1, WINDOW_CALLS_MAX - w.calls)
		if h ~= nil and k > 0 then
			h[2] = h[2] + k
			w.calls = w.calls + k
			if slow then
				h[4] = h[4] + k
				w.slow = w.slow + k
			end
		end
	end

	-- Up to m successes alike on c (fitted, its hold ended at now if
	-- due), each as record(1) applies it, in bulk: stops after a
	-- transition (the window is emptied between). Returns how many.
	function fn.success_run(m)
		local slow = P.slow_call_ms > 0 and duration >= P.slow_call_ms
		local gated = c.rep_n > 1
		local rate = P.trip == 'rate' and not c.hold
		local from = c.state
		local j, reason = m, nil
		if slow and rate and gated then
			fn.reporters_note(c, reporter)
		end
		if from == 'closed' then
			c.fc = 0
			local w = window
			if rate and w then
				fn.window_add(false, slow)
				local allow = fn.reporters_allow_trip(c, gated)
				local done = 1
				if allow and fn.rate_reached(fn.window_counts()) then
					j = 1
					reason = 'failure_rate'
				elseif not allow then
					fn.window_add_run(w, slow, m - 1)
				else
					while done < m do
						local skip = fn.successes_safe(w, slow, m - done)
						fn.window_add_run(w, slow, skip)
						done = done + skip
						if done == m then
							break
						end
						fn.window_add(false, slow)
						done = done + 1
						if fn.rate_reached(w) then
							j = done
							reason = 'failure_rate'
							break
						end
					end
				end
				if reason ~= nil then
					fn.trip_open(c)
				end
			end
		elseif from == 'half_open' then
			if slow and rate then
				j = 1
				fn.trial_failed(c)
				reason = 'trial_failed'
			elseif c.sc + j < P.success_threshold then
				c.sc = c.sc + j
			else
				j = P.success_threshold - c.sc
				fn.close_after_trials(c)
				reason = 'trial_succeeded'
			end
		end
		-- (open: a success moves nothing.)
		c.t_successes = c.t_successes + j
		if slow then
			c.t_slow = c.t_slow + j
		end
		fn.change_merge(from, c.state, reason)
		fn.transition_done(c, from)
		return j
	end
end

if op == 'success' then
	-- extra.count: that many successes alike (PROTO_SUCCESS_COUNT_MAX).
	function ops.success()
		local n = fn.arg('count')
		if n ~= nil and (type(n) ~= 'number' or n ~= math.floor(n) or n < 1 or
			n > SUCCESS_COUNT_MAX) then
			return 'success needs a count from 1 to ' .. SUCCESS_COUNT_MAX
		end
		n = n or 1
		window_ahead = n
		fn.record(1)
		n = n - 1
		while n > 0 do
			n = n - fn.success_run(n)
		end
	end
end

if op == 'failure' then
	function ops.failure()
		fn.record(2)
	end
end

if op == 'ignore' then
	function ops.ignore()
		fn.record(0)
	end
end

-- A client's own refusals (protocol 3, section 6): counted in a stored
-- circuit's totals, nothing else.
if op == 'rejected' then
	function ops.rejected()
		local n = fn.arg('count')
		if type(n) ~= 'number' or n ~= math.floor(n) or n < 1 or n > REJECTED_COUNT_MAX then
			return 'rejected needs a count from 1 to ' .. REJECTED_COUNT_MAX
		end
		if c == nil then
			return
		end
		fn.hold_expire(c)
		c.t_rejected = c.t_rejected + n
	end
end

-- outcomes: a fold of one host's outcomes of this circuit (op-fleet.c
-- coalesces them while a call for the circuit is in flight), applied one
-- by one in arrival order at this call's now, each exactly as its own
-- success / failure / ignore / rejected call would apply it (same rule
-- order, totals, version, events). extra.items: runs [kind, value,
-- reporter, n, want, one]: kind "s" | "f" | "i" | "r", value its
-- duration_ms ("r": its count), n the run's length (identical outcomes one
-- after another), want 1: its request waits for a reply (then n is 1, but
-- for one), one 1 (optional, "s" only): the run is one request's counted
-- successes (record_success's count, n up to SUCCESS_COUNT_MAX), applied in
-- bulk and answered once, [run, n, circuit, change] after its last, its
-- change from the first state it left to the last it reached. Every
-- outcome that changes the state publishes its own event (the circuit as
-- that outcome left it), as its own call would. Reply member "items":
-- [[run, k, circuit, change], ...] in order, one for each outcome that
-- changed the state or wants a reply (k: its place in its run, from 1).
if op == 'outcomes' then
	-- Up to m outcomes of a run (failures, or successes) on a closed, unheld
	-- circuit under the rate rule with its window fitted, each exactly as
	-- record applies it (on_outcome, rate_trips), without record's calls;
	-- stops after the outcome that trips. Returns how many it applied.
	function fn.rate_run(failure, m)
		local slow_rule = P.slow_call_ms > 0
		local slow = slow_rule and duration >= P.slow_call_ms
		local bad = failure or slow
		local gated = c.rep_n > 1
		local w = window
		local count = w.kind == 'count'
		local minimum, rate, slow_rate = P.minimum_calls, P.failure_rate, P.slow_call_rate
		for j = 1, m do
			fn.totals_note(c, failure, slow)
			if bad and gated then
				fn.reporters_note(c, reporter)
			end
			fn.chain_note(c, failure)
			-- window_add: a time window's head bucket, once made at now (now
			-- does not move within a call), takes the run's next outcomes
			-- as window_add would.
			local h = w.head
			if count then
				fn.count_add(w, failure, slow)
			elseif h == nil then
				fn.window_add(failure, slow)
			elseif w.calls < WINDOW_CALLS_MAX then
				h[2] = h[2] + 1
				w.calls = w.calls + 1
				if failure then
					h[3] = h[3] + 1
					w.failures = w.failures + 1
				end
				if slow then
					h[4] = h[4] + 1
					w.slow = w.slow + 1
				end
			end
			-- rate_trips (window_counts: window_add moved a time window's
			-- head to now already).
			local calls = w.calls
			if calls ~= 0 and calls >= minimum and
				(w.failures * 100 >= rate * calls or (slow_rule and w.slow * 100 >= slow_rate * calls)) and
				fn.reporters_allow_trip(c, gated) then
				fn.trip_open(c)
				fn.change_merge('closed', 'open', 'failure_rate')
				fn.transition_done(c, 'closed')
				return j
			end
		end
		return m
	end

	function ops.outcomes()
		local items = fn.arg('items')
		if type(items) ~= 'table' or #items == 0 then
			return 'outcomes needs items'
		end
		for i = 1, #items do
			local it = items[i]
			if type(it) ~= 'table' then
				return 'outcomes item ' .. i .. ' is not an array'
			end
			local k, v, r, n, w, one = it[1], it[2], it[3], it[4], it[5], it[6]
			if (k ~= 's' and k ~= 'f' and k ~= 'i' and k ~= 'r') or type(v) ~= 'number' or
				v ~= math.floor(v) or type(r) ~= 'string' or type(n) ~= 'number' or
				n ~= math.floor(n) or n < 1 or n > COUNT_MAX or (w ~= 0 and w ~= 1) or
				(one ~= nil and one ~= 0 and one ~= 1) or (one == 1 and (k ~= 's' or n > SUCCESS_COUNT_MAX)) or
				(w == 1 and n ~= 1 and one ~= 1) or (k == 'r' and (v < 1 or v > REJECTED_COUNT_MAX)) then
				return 'outcomes item ' .. i .. ' is malformed'
			end
		end
		local CODE = { s = 1, f = 2, i = 0 }
		local out = {}
		local fitted = false
		-- A count window reads the ring entries the fold will overwrite at
		-- once (count_add).
		window_ahead = 0
		for i = 1, #items do
			local kind = items[i][1]
			if kind == 's' or kind == 'f' then
				window_ahead = window_ahead + items[i][4]
			end
		end
		for i = 1, #items do
			local it = items[i]
			local kind, value, n, want = it[1], it[2], it[4], it[5] == 1
			-- A counted success: one request's, answered once at its end
			-- with the change its steps made (first from, last to).
			local one = it[6] == 1
			local one_change = nil
			reporter = it[3]
			duration = value
			local k = 1
			while k <= n do
				local had = c ~= nil
				local st, oa, hold = nil, nil, nil
				if had then
					st, oa, hold = c.state, c.oa, c.hold
				end
				change = nil
				local step = 1
				if kind == 'r' then
					if c ~= nil then
						fn.hold_expire(c)
						c.t_rejected = c.t_rejected + value
					end
				elseif fitted and kind == 's' then
					-- A run of successes in bulk, whatever the state, up
					-- to a transition (if one happens).
					step = fn.success_run(n - k + 1)
				elseif fitted and kind == 'f' and c.state == 'closed' and
					P.trip == 'rate' and not c.hold and window then
					-- A run of failures on a closed circuit under the rate
					-- rule: one after another as record applies them, up
					-- to the one that trips (if one does).
					step = fn.rate_run(true, n - k + 1)
				else
					fn.record(CODE[kind])
					-- The policy is fitted (window, reporters) from here on.
					fitted = fitted or kind ~= 'i'

				end
				if c ~= nil then
					-- As each call's reply and persist would: the version
					-- counts calls that changed state, opened_at or hold.
					if not had or c.state ~= st or c.oa ~= oa or c.hold ~= hold then
						c.ver = c.ver + 1
					end
					fn.window_counts()
				end
				if one then
					-- Its events as its steps make them; its answer after
					-- the last.
					if c ~= nil and change ~= nil then
						local cj = fn.circuit_json(c)
						redis.call('PUBLISH', channel,
							format('{"origin":%s,"name":%s,"now":%.0f,"circuit":%s,"change":%s}',
								cjson.encode(origin), cjson.encode(name), now, cj, fn.change_json()))
						if one_change == nil then
							one_change = change
						else
							one_change.to, one_change.reason = change.to, change.reason
						end
					end
					if k + step > n and (one_change ~= nil or want) then
						change = one_change
						out[#out + 1] = format('[%d,%d,%s,%s]', i, n, fn.circuit_json(c),
							fn.change_json())
					end
				elseif c ~= nil and (change ~= nil or want) then
					local cj = fn.circuit_json(c)
					local change_text = fn.change_json()
					-- (Only the last outcome of a step can change the state;
					-- one that wants a reply is a run of one.)
					out[#out + 1] = format('[%d,%d,%s,%s]', i, k + step - 1, cj, change_text)
					if change ~= nil then
						redis.call('PUBLISH', channel,
							format('{"origin":%s,"name":%s,"now":%.0f,"circuit":%s,"change":%s}',
								cjson.encode(origin), cjson.encode(name), now, cj, change_text))
					end
				elseif want then
					out[#out + 1] = format('[%d,%d,null,null]', i, k)
				end
				k = k + step
			end
		end
		change = nil
		if c ~= nil then
			c.ver_set = c.ver
		end
		fn.add('items', '[' .. table.concat(out, ',') .. ']')
	end
end

if op == 'allow' then
	function ops.allow()
		fn.need_circuit()
		fn.hold_expire(c)
		if not c.hold then
			local from = c.state
			local reason = fn.on_allow(c)
			fn.change_merge(from, c.state, reason)
			fn.transition_done(c, from)
		end
		local allowed, retry, permit = false, 0, nil
		if c.state == 'closed' then
			allowed = true
		elseif c.state == 'open' then
			c.t_rejected = c.t_rejected + 1
			retry = fn.retry_after(c)
		else
			local slot = fn.slot_take(token)
			if slot then
				allowed = true
				permit = slot
			else
				c.t_rejected = c.t_rejected + 1
				local first = redis.call('ZRANGE', K_SLOTS, 0, 0, 'WITHSCORES')
				if #first > 0 then
					retry = tonumber(first[2]) - now
				end
			end
		end
		fn.add('allowed', fn.bool_json(allowed))
		fn.add('retry_after_ms', fn.int(retry))
		fn.add('permit', fn.permit_json(permit))
	end
end

if op == 'cas' then
	function ops.cas()
		local from, to = fn.state_arg('from'), fn.state_arg('to')
		if from == nil or to == nil then
			return 'cas needs from and to states'
		end
		if c ~= nil then
			fn.hold_expire(c)
		end
		local current = c and c.state or 'closed'
		if current ~= from or (c ~= nil and c.hold) then
			fn.add('applied', 'false')
			return
		end
		fn.need_circuit()
		fn.force(c, to)
		if from ~= to then
			fn.change_merge(from, to, 'cas')
		end
		fn.transition_done(c, from)
		fn.add('applied', 'true')
	end
end

if op == 'set_state' then
	function ops.set_state()
		local state = fn.state_arg('state')
		if state == nil then
			return 'set_state needs a state'
		end
		local hold = fn.arg('hold')
		fn.need_circuit()
		local before = c.state
		fn.force(c, state)
		fn.transition_done(c, before)
		if hold ~= nil then
			local ttl = hold.ttl_ms
			local user = hold.by_user
			local reason = hold.reason
			if ttl == NULL or ttl == nil then
				ttl = 0
			end
			if user == NULL or user == nil then
				user = ''
			end
			if reason == NULL then
				reason = nil
			end
			c.hold = {
				state = c.state,
				since = now,
				["until"] = ttl > 0 and now + ttl or nil,
				by_uid = (hold.by_uid ~= NULL and hold.by_uid) or 0,
				by_user = fn.text_cut(user, USER_MAX),
				reason = fn.text_cut(reason, REASON_MAX),
			}
			fn.change_merge(before, state, 'held')
		else
			local was_held = c.hold ~= nil
			c.hold = nil
			if before ~= state or was_held then
				fn.change_merge(before, state, 'forced')
			end
		end
	end
end

if op == 'release' then
	function ops.release()
		local released = false
		if c ~= nil and c.hold then
			local from = c.state
			fn.hold_end(c, c.hold.state)
			fn.transition_done(c, from)
			c.hold = nil
			fn.change_merge(from, c.state, 'released')
			released = true
		end
		fn.add('released', fn.bool_json(released))
	end
end

if op == 'acquire_slot' then
	function ops.acquire_slot()
		fn.need_circuit()
		fn.hold_expire(c)
		local slot = fn.slot_take(token)
		fn.add('acquired', fn.bool_json(slot ~= nil))
		fn.add('permit', fn.permit_json(slot))
	end
end

if op == 'release_slot' then
	function ops.release_slot()
		local released = false
		if token ~= nil then
			local at = redis.call('ZSCORE', K_SLOTS, token)
			if at then
				redis.call('ZREM', K_SLOTS, token)
				released = now < tonumber(at)
			end
		end
		fn.add('released', fn.bool_json(released))
	end
end

if op == 'delete' or op == 'writeback' then
	function ops.delete()
		redis.call('DEL', K_CIRCUIT, K_SLOTS, K_WINDOW)
		window = false
		c = nil
	end
end

-- writeback: see the header (an operator's action made during an outage).
if op == 'writeback' then
	-- Does the stored hold h match known hold k (the hold a host saw)?
	function fn.hold_is(h, k)
		return h ~= nil and type(k) == 'table' and h.state == k.state and h.since == k.since and
			h.by_uid == k.by_uid and h.by_user == k.by_user
	end

	function ops.writeback()
		local action, known = fn.arg('action'), fn.arg('known')
		local state = fn.state_arg('state')
		if action ~= 'release' and action ~= 'delete' and action ~= 'set_state' then
			return 'writeback needs an action'
		end
		if action == 'set_state' and state == nil then
			return 'writeback set_state needs a state'
		end
		if type(known) ~= 'table' then
			return 'writeback needs known'
		end
		if c == nil then
			fn.add('applied', 'false')
			return
		end
		fn.hold_expire(c)
		local kh = known.hold
		local same = fn.hold_is(c.hold, kh)
		local oa = known.opened_at
		if oa == NULL then
			oa = nil
		end
		if (c.hold and not same) or (action == 'release' and not same) or
			(action ~= 'release' and c.state ~= 'closed' and c.oa ~= oa) then
			fn.add('applied', 'false')
			return
		end
		local from = c.state
		if action == 'release' then
			fn.hold_end(c, c.hold.state)
			fn.transition_done(c, from)
			c.hold = nil
			fn.change_merge(from, c.state, 'writeback')
		elseif action == 'delete' then
			ops.delete()
			deleted = true
		else
			local was_held = c.hold ~= nil
			fn.force(c, state)
			if state == 'open' and fn.arg('at') ~= nil then
				c.oa = fn.arg('at')
			end
			fn.transition_done(c, from)
			c.hold = nil
			if from ~= state or was_held then
				fn.change_merge(from, state, 'writeback')
			end
		end
		fn.add('applied', 'true')
	end
end

-- restore: this host's copy of a circuit is newer (a higher version of
-- the same circuit: created_at equal) than the one Redis holds, a
-- replica promoted before it received the last changes. The copy's state,
-- counts, opened_at, break and hold are written with its version; a
-- circuit Redis does not hold, or holds at the copy's version or later, is
-- left (applied false).
if op == 'restore' then
	function ops.restore()
		local m = fn.arg('circuit')
		if type(m) ~= 'table' or type(m.version) ~= 'number' or type(m.created_at) ~= 'number' or
			(m.state ~= 'closed' and m.state ~= 'open' and m.state ~= 'half_open') then
			return 'restore needs a circuit with state, version and created_at'
		end
		if c == nil or c.created_at ~= m.created_at or c.ver >= m.version then
			fn.add('applied', 'false')
			return
		end
		local function num(v)
			if v == nil or v == NULL then
				return nil
			end
			return v
		end
		local from = c.state
		c.state = m.state
		c.oa = num(m.opened_at)
		c.lfa = num(m.last_failure_at)
		c.cbm = num(m.current_break_ms) or 0
		c.fc = num(m.failure_count) or 0
		c.sc = num(m.success_count) or 0
		local h = m.hold
		if type(h) == 'table' then
			c.hold = {
				state = (h.state == 'closed') and 'closed' or 'open',
				since = num(h.since) or now,
				["until"] = num(h['until']),
				by_uid = num(h.by_uid) or 0,
				by_user = fn.text_cut(num(h.by_user) or '', USER_MAX),
				reason = fn.text_cut(num(h.reason), REASON_MAX),
			}
		else
			c.hold = nil
		end
		c.ver_set = m.version
		if from ~= c.state then
			fn.transition_done(c, from)
			fn.change_merge(from, c.state, 'merged')
		end
		fn.add('applied', 'true')
	end
end

if op == 'merge' then
	function ops.merge()
		local m = fn.arg('circuit')
		if type(m) ~= 'table' then
			return 'merge needs a circuit'
		end
		if c ~= nil then
			fn.hold_expire(c)
		end
		local h = m.hold
		local reseed = fn.arg('reseed') == true
		local function num(v)
			if v == nil or v == NULL then
				return nil
			end
			return v
		end
		if reseed and type(h) == 'table' and num(h['until']) ~= nil and h['until'] <= now then
			h = nil -- lapsed: not placed again
		end
		if type(h) == 'table' then
			-- An operator's hold placed on this host during the outage holds
			-- fleet-wide, unless the fleet's circuit is held already; in a
			-- re-seed the newer hold wins.
			if c ~= nil and c.hold and
				not (reseed and num(h.since) ~= nil and h.since > c.hold.since) then
				return
			end
			local state = (h.state == 'closed') and 'closed' or 'open'
			fn.need_circuit()
			local from = c.state
			if from ~= state then
				fn.force(c, state)
				if state == 'open' and m.opened_at ~= nil and m.opened_at ~= NULL then
					c.oa = m.opened_at
				end
				fn.transition_done(c, from)
			end
			local user = (h.by_user ~= nil and h.by_user ~= NULL) and h.by_user or ''
			local reason = (h.reason ~= nil and h.reason ~= NULL) and h.reason or nil
			c.hold = {
				state = state,
				since = (h.since ~= nil and h.since ~= NULL) and h.since or now,
				["until"] = (h["until"] ~= nil and h["until"] ~= NULL) and h["until"] or nil,
				by_uid = (h.by_uid ~= nil and h.by_uid ~= NULL) and h.by_uid or 0,
				by_user = fn.text_cut(user, USER_MAX),
				reason = fn.text_cut(reason, REASON_MAX),
			}
			fn.change_merge(from, state, 'held')
			return
		end
		if reseed and m.state ~= 'open' and m.state ~= 'half_open' then
			return -- nothing to re-seed: closed is what an emptied Redis says
		end
		if c ~= nil and c.hold then
			return
		end
		if c ~= nil and c.state == 'open' then
			-- Re-seeded by two hosts: the later trip wins.
			local oa = num(m.opened_at)
			if reseed and oa ~= nil and (c.oa == nil or oa > c.oa) then
				c.oa = oa
				c.cbm = num(m.current_break_ms) or 0
			end
			return
		end
		fn.need_circuit()
		local from = c.state
		c.state = 'open'
		c.sc = 0
		c.oa = (m.opened_at ~= NULL and m.opened_at) or now
		c.cbm = (m.current_break_ms ~= NULL and m.current_break_ms) or 0
		c.fc = (m.failure_count ~= NULL and m.failure_count) or c.fc
		if m.last_failure_at ~= nil and m.last_failure_at ~= NULL then
			c.lfa = m.last_failure_at
		end
		fn.transition_done(c, from)
		if from ~= 'open' then
			fn.change_merge(from, 'open', 'merged')
		end
	end
end

local handler = ops[op]
if handler == nil then
	return fn.fail('unknown op ' .. tostring(op))
end
if (op == 'allow' or op == 'acquire_slot') and token == nil then
	return fn.fail(op .. ' needs a token')
end
-- Validate before anything is written: handlers return a message only
-- before their first write.
local problem = handler()
if problem then
	return fn.fail(problem)
end

-- The view first: reading a time window at now may drop buckets, which
-- persist() then stores.
if c ~= nil then
	fn.ver_update(c)
end
local cj = fn.circuit_json(c)
if c ~= nil then
	fn.persist(c)
end
local change_text = fn.change_json()
local text = format('{"now":%.0f,"existed":%s,"circuit":%s,"change":%s%s}', now,
	fn.bool_json(existed), cj, change_text, table.concat(extra))

if change ~= nil or ((op == 'delete' or deleted) and existed) then
	redis.call('PUBLISH', channel,
		format('{"origin":%s,"name":%s,"now":%.0f,"circuit":%s,"change":%s}',
			cjson.encode(origin), cjson.encode(name), now, cj, change_text))
end
return text
