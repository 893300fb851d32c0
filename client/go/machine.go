// SPDX-License-Identifier: Apache-2.0

// machine.go — the circuit-breaker state machine, pure: PROTOCOL.md §7 and
// §7a (consecutive and rate rules, count and time windows, slow calls,
// break_backoff) as cbd's src/core/breaker.c and src/core/window.c run them.
//
// No I/O and no clock reads: every decision takes now (ms since the Unix
// epoch) from the caller, so the LOCAL fallback and the tests (virtual
// time, the shared trace proto/traces/state-machine.json) run the same code.

package cbdclient

import (
	"encoding/json"
	"fmt"
)

// Circuit states.
const (
	StateClosed   = "closed"
	StateOpen     = "open"
	StateHalfOpen = "half_open"
)

// Trip rules and window kinds (§7a).
const (
	TripConsecutive = "consecutive"
	TripRate        = "rate"
	WindowCount     = "count"
	WindowTime      = "time"
)

// Bounds of the protocol's numbers (§5) and the time window's bucket (§7a).
const (
	CountMax       = 1_000_000_000
	DurationMax    = int64(1) << 53
	WindowBucketMs = 1000
)

// Reasons of transitions (the texts cbd logs).
const (
	ReasonFailureThreshold = "failure threshold reached"
	ReasonFailureRate      = "failure or slow-call rate reached"
	ReasonTrialFailed      = "trial call failed"
	ReasonTrialSucceeded   = "trial calls succeeded"
	ReasonBreakElapsed     = "break elapsed"
)

// Ctx is the ctx member of a request: policy keys (§6) and "now".
type Ctx map[string]any

// Policy is a resolved policy (§6, §7a). 0 means unset for MaxGapMs,
// SlowCallMs and BreakMaxMs.
type Policy struct {
	Trip             string
	FailureThreshold int64
	SuccessThreshold int64
	BreakMs          int64
	HalfOpenMax      int64
	SlotTTLMs        int64
	MaxGapMs         int64
	Window           string
	WindowSize       int64
	MinimumCalls     int64
	FailureRate      int64
	SlowCallMs       int64
	SlowCallRate     int64
	MinReporters     int64
	ReporterWindowMs int64
	BreakBackoff     int64
	BreakMaxMs       int64
}

// presets are the built-in presets of §7a.
var presets = map[string]Ctx{
	"http-external": {"trip": TripRate, "window": WindowCount, "window_size": 10,
		"minimum_calls": 5, "failure_rate": 50, "break_ms": 30000},
	"service": {"trip": TripRate, "window": WindowCount, "window_size": 10,
		"minimum_calls": 5, "failure_rate": 50, "break_ms": 30000},
	"database": {"trip": TripRate, "window": WindowCount, "window_size": 5,
		"minimum_calls": 3, "failure_rate": 30, "break_ms": 15000},
}

// policyKeys are the policy members a ctx may carry, as table rows: the
// key and the field it sets.
var policyKeys = []struct {
	key string
	num func(p *Policy) *int64
	str func(p *Policy) *string
}{
	{"trip", nil, func(p *Policy) *string { return &p.Trip }},
	{"window", nil, func(p *Policy) *string { return &p.Window }},
	{"failure_threshold", func(p *Policy) *int64 { return &p.FailureThreshold }, nil},
	{"success_threshold", func(p *Policy) *int64 { return &p.SuccessThreshold }, nil},
	{"break_ms", func(p *Policy) *int64 { return &p.BreakMs }, nil},
	{"half_open_max", func(p *Policy) *int64 { return &p.HalfOpenMax }, nil},
	{"slot_ttl_ms", func(p *Policy) *int64 { return &p.SlotTTLMs }, nil},
	{"max_gap_ms", func(p *Policy) *int64 { return &p.MaxGapMs }, nil},
	{"window_size", func(p *Policy) *int64 { return &p.WindowSize }, nil},
	{"minimum_calls", func(p *Policy) *int64 { return &p.MinimumCalls }, nil},
	{"failure_rate", func(p *Policy) *int64 { return &p.FailureRate }, nil},
	{"slow_call_ms", func(p *Policy) *int64 { return &p.SlowCallMs }, nil},
	{"slow_call_rate", func(p *Policy) *int64 { return &p.SlowCallRate }, nil},
	{"min_reporters", func(p *Policy) *int64 { return &p.MinReporters }, nil},
	{"reporter_window_ms", func(p *Policy) *int64 { return &p.ReporterWindowMs }, nil},
	{"break_backoff", func(p *Policy) *int64 { return &p.BreakBackoff }, nil},
	{"break_max_ms", func(p *Policy) *int64 { return &p.BreakMaxMs }, nil},
}

// IsPolicyKey says whether key is a policy member of §6 (or "preset").
func IsPolicyKey(key string) bool {
	if key == "preset" {
		return true
	}
	for _, k := range policyKeys {
		if k.key == key {
			return true
		}
	}
	return false
}

func builtinPolicy() Policy {
	return Policy{Trip: TripConsecutive, FailureThreshold: 5, SuccessThreshold: 2,
		BreakMs: 30000, HalfOpenMax: 1, Window: WindowCount, MinimumCalls: 10,
		FailureRate: 50, SlowCallRate: 100, MinReporters: 1, ReporterWindowMs: 60000,
		BreakBackoff: 1}
}

// toInt reads a JSON-ish number (int, int64, float64, json.Number).
func toInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		if n != float64(int64(n)) {
			return 0, false
		}
		return int64(n), true
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

func (p *Policy) apply(ctx Ctx) error {
	for _, k := range policyKeys {
		v, ok := ctx[k.key]
		if !ok || v == nil {
			continue
		}
		if k.str != nil {
			s, isStr := v.(string)
			if !isStr {
				return fmt.Errorf("ctx.%s must be a string", k.key)
			}
			*k.str(p) = s
			continue
		}
		n, isNum := toInt(v)
		if !isNum {
			return fmt.Errorf("ctx.%s must be an integer", k.key)
		}
		*k.num(p) = n
	}
	return nil
}

// PolicyFromCtx is the policy a ctx declares: a built-in preset below its
// own keys, built-in defaults for the rest (unknown keys and nil ignored).
func PolicyFromCtx(ctx Ctx) (Policy, error) {
	p := builtinPolicy()
	if name, ok := ctx["preset"].(string); ok {
		preset, known := presets[name]
		if !known {
			return p, fmt.Errorf("ctx.preset %q is not a built-in preset", name)
		}
		if err := p.apply(preset); err != nil {
			return p, err
		}
	}
	if err := p.apply(ctx); err != nil {
		return p, err
	}
	if p.WindowSize == 0 {
		if p.Window == WindowCount {
			p.WindowSize = 100
		} else {
			p.WindowSize = 60000
		}
	}
	if p.SlotTTLMs == 0 {
		p.SlotTTLMs = p.BreakMs
	}
	return p, nil
}

// Machine is the state of one circuit (§7), less name and retry_after_ms.
// LastFailureAt and OpenedAt are nil when null.
type Machine struct {
	State          string
	FailureCount   int64
	SuccessCount   int64
	LastFailureAt  *int64
	OpenedAt       *int64
	CurrentBreakMs int64 // the break grown by break_backoff; 0: BreakMs
}

// NewMachine is a circuit in its initial state.
func NewMachine() Machine { return Machine{State: StateClosed} }

func at(now int64) *int64 { return &now }

// MachineFromSnapshot is the state a snapshot cbd sent describes.
func MachineFromSnapshot(s *Snapshot) Machine {
	m := Machine{State: s.State, FailureCount: s.FailureCount, SuccessCount: s.SuccessCount,
		LastFailureAt: s.LastFailureAt, OpenedAt: s.OpenedAt}
	if m.State == "" {
		m.State = StateClosed
	}
	if bm, ok := toInt(s.Policy["break_ms"]); s.CurrentBreakMs > 0 && (!ok || bm != s.CurrentBreakMs) {
		m.CurrentBreakMs = s.CurrentBreakMs
	}
	return m
}

// Window is the rate rule's sliding window: the last N calls (count) or
// the calls of the last N ms in one-second buckets (time).
type Window struct {
	kind                  string
	slots                 int64
	Calls, Failures, Slow int64
	ring                  [][2]bool
	next                  int64
	buckets               [][3]int64
	lastSecond            *int64
}

func windowSlots(kind string, size int64) int64 {
	if kind == WindowCount {
		return size
	}
	return (size + WindowBucketMs - 1) / WindowBucketMs
}

// NewWindow is an empty window of kind and size.
func NewWindow(kind string, size int64) *Window {
	w := &Window{kind: kind, slots: windowSlots(kind, size)}
	if w.slots < 1 {
		w.slots = 1
	}
	w.Reset()
	return w
}

func (w *Window) fits(kind string, size int64) bool {
	return w.kind == kind && w.slots == windowSlots(kind, size)
}

// Reset empties the window (every transition does).
func (w *Window) Reset() {
	w.Calls, w.Failures, w.Slow = 0, 0, 0
	if w.kind == WindowCount {
		w.ring = make([][2]bool, w.slots)
		w.next = 0
	} else {
		w.buckets = make([][3]int64, w.slots)
		w.lastSecond = nil
	}
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (w *Window) advance(second int64) {
	last := w.lastSecond
	if last != nil && second <= *last {
		return
	}
	start := second - w.slots + 1
	if last != nil && second-*last <= w.slots {
		start = *last + 1
	}
	for s := start; s <= second; s++ {
		b := &w.buckets[((s%w.slots)+w.slots)%w.slots]
		w.Calls -= b[0]
		w.Failures -= b[1]
		w.Slow -= b[2]
		*b = [3]int64{}
	}
	w.lastSecond = at(second)
}

func (w *Window) add(failure, slow bool, now int64) {
	if w.kind == WindowCount {
		if w.Calls == w.slots {
			old := w.ring[w.next]
			w.Calls--
			w.Failures -= b2i(old[0])
			w.Slow -= b2i(old[1])
		}
		w.ring[w.next] = [2]bool{failure, slow}
		w.next = (w.next + 1) % w.slots
	} else {
		w.advance(now / WindowBucketMs)
		// A clock behind the newest bucket counts in the newest bucket.
		b := &w.buckets[*w.lastSecond%w.slots]
		b[0]++
		b[1] += b2i(failure)
		b[2] += b2i(slow)
	}
	w.Calls++
	w.Failures += b2i(failure)
	w.Slow += b2i(slow)
}

// Counts are the calls, failures and slow calls in the window at now.
func (w *Window) Counts(now int64) (calls, failures, slow int64) {
	if w.kind == WindowTime && w.lastSecond != nil {
		w.advance(now / WindowBucketMs)
	}
	return w.Calls, w.Failures, w.Slow
}

// BreakInEffect is break_ms, or the break break_backoff grew.
func (m *Machine) BreakInEffect(p Policy) int64 {
	if m.CurrentBreakMs > 0 {
		return m.CurrentBreakMs
	}
	return p.BreakMs
}

func (m *Machine) chainContinues(p Policy, now int64) bool {
	if p.MaxGapMs <= 0 || m.LastFailureAt == nil {
		return true
	}
	return now-*m.LastFailureAt <= p.MaxGapMs
}

func (m *Machine) breakElapsed(p Policy, now int64) bool {
	if m.State != StateOpen {
		return false
	}
	if m.OpenedAt == nil {
		return true
	}
	return now-*m.OpenedAt >= m.BreakInEffect(p)
}

// RetryAfterMs is the time left in the break at now (0 when not open).
func (m *Machine) RetryAfterMs(p Policy, now int64) int64 {
	if m.State != StateOpen || m.breakElapsed(p, now) {
		return 0
	}
	elapsed := int64(0)
	if now > *m.OpenedAt {
		elapsed = now - *m.OpenedAt
	}
	return m.BreakInEffect(p) - elapsed
}

func (m *Machine) tripOpen(now int64) {
	m.State = StateOpen
	m.OpenedAt = at(now)
	m.SuccessCount = 0
}

func (m *Machine) trialFailed(p Policy, now int64) {
	if p.BreakBackoff > 1 {
		grown := m.BreakInEffect(p) * p.BreakBackoff
		if grown > DurationMax {
			grown = DurationMax
		}
		if p.BreakMaxMs > 0 && grown > p.BreakMaxMs {
			grown = p.BreakMaxMs
		}
		m.CurrentBreakMs = grown
	}
	m.tripOpen(now)
	m.LastFailureAt = at(now)
}

// Force puts the circuit in state (set_state, cas, the break elapsing).
func (m *Machine) Force(state string, now int64) error {
	switch state {
	case StateClosed:
		m.FailureCount, m.SuccessCount = 0, 0
		m.OpenedAt = nil
		m.CurrentBreakMs = 0
	case StateOpen:
		m.OpenedAt = at(now)
		m.SuccessCount = 0
	case StateHalfOpen:
		m.SuccessCount = 0
	default:
		return fmt.Errorf("state must be one of closed, open, half_open")
	}
	m.State = state
	return nil
}

// OnAllow moves open with its break elapsed to half_open; the reason of
// the transition, or "".
func (m *Machine) OnAllow(p Policy, now int64) string {
	if !m.breakElapsed(p, now) {
		return ""
	}
	_ = m.Force(StateHalfOpen, now)
	return ReasonBreakElapsed
}

// OnOutcome applies one call's outcome (window: the rate rule's, may be
// nil for consecutive); the reason of a transition, or "". The window is
// not emptied here (the caller does, for every transition).
func (m *Machine) OnOutcome(p Policy, now int64, failure, slow bool, w *Window) string {
	slowRule := p.SlowCallMs > 0
	bad := failure || (slow && p.Trip == TripRate && slowRule)
	switch m.State {
	case StateClosed:
		if failure {
			if m.chainContinues(p, now) {
				m.FailureCount++
			} else {
				m.FailureCount = 1
			}
			m.LastFailureAt = at(now)
		} else {
			m.FailureCount = 0
		}
		trips := false
		if p.Trip == TripRate {
			if w != nil {
				w.add(failure, slowRule && slow, now)
				calls, failures, slows := w.Counts(now)
				trips = calls > 0 && calls >= p.MinimumCalls &&
					(failures*100 >= p.FailureRate*calls ||
						(slowRule && slows*100 >= p.SlowCallRate*calls))
			}
		} else {
			trips = failure && m.FailureCount >= p.FailureThreshold
		}
		if !trips {
			return ""
		}
		m.tripOpen(now)
		if p.Trip == TripRate {
			return ReasonFailureRate
		}
		return ReasonFailureThreshold
	case StateHalfOpen:
		if bad {
			m.trialFailed(p, now)
			return ReasonTrialFailed
		}
		m.SuccessCount++
		if m.SuccessCount < p.SuccessThreshold {
			return ""
		}
		m.State = StateClosed
		m.FailureCount, m.SuccessCount = 0, 0
		m.OpenedAt = nil
		m.CurrentBreakMs = 0
		return ReasonTrialSucceeded
	}
	// open: a straggler never extends the break window.
	if failure {
		m.LastFailureAt = at(now)
	}
	return ""
}
