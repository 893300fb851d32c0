// SPDX-License-Identifier: Apache-2.0

// local.go — circuits kept in this process: cbd's allow / record / get /
// set_state semantics (PROTOCOL.md §7, §7a, §8 "allow and record") over
// the pure state machine (machine.go), with trial slots (half_open_max,
// slot_ttl_ms). The breaker's LOCAL fallback runs here while cbd is
// unreachable. Every method takes the policy and now (ms) from the caller;
// nothing here reads a clock. Each circuit's window is emptied on every
// transition, as cbd does. One process reports, so min_reporters counts
// as 1.

package cbdclient

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
)

type localCircuit struct {
	m      Machine
	window *Window
	slots  map[string]int64 // token -> expires_at
}

// LocalStore holds in-process circuits; safe for goroutines (one mutex).
type LocalStore struct {
	mu       sync.Mutex
	circuits map[string]*localCircuit
	instance string
	counter  uint64
}

// NewLocalStore is an empty store.
func NewLocalStore() *LocalStore {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &LocalStore{circuits: map[string]*localCircuit{}, instance: hex.EncodeToString(b[:])}
}

func (s *LocalStore) circuit(name string) *localCircuit {
	c := s.circuits[name]
	if c == nil {
		c = &localCircuit{m: NewMachine(), slots: map[string]int64{}}
		s.circuits[name] = c
	}
	return c
}

func (c *localCircuit) windowFor(p Policy) *Window {
	if p.Trip != TripRate {
		return nil
	}
	if c.window == nil || !c.window.fits(p.Window, p.WindowSize) {
		c.window = NewWindow(p.Window, p.WindowSize)
	}
	return c.window
}

func (c *localCircuit) transitioned(before string) {
	if c.m.State != before && c.window != nil {
		c.window.Reset()
	}
}

func (c *localCircuit) snapshot(name string, p Policy, now int64) Snapshot {
	s := Snapshot{Name: name, State: c.m.State, FailureCount: c.m.FailureCount,
		SuccessCount: c.m.SuccessCount, LastFailureAt: c.m.LastFailureAt, OpenedAt: c.m.OpenedAt,
		RetryAfterMs: c.m.RetryAfterMs(p, now), CurrentBreakMs: c.m.BreakInEffect(p)}
	if c.window != nil && p.Trip == TripRate {
		calls, failures, slow := c.window.Counts(now)
		s.Window = &WindowView{Calls: calls, Failures: failures, Slow: slow}
	}
	return s
}

// Seed starts name from m (a copy), with no slots and an empty window.
func (s *LocalStore) Seed(name string, m Machine, now int64) {
	if m.State != StateClosed && m.OpenedAt == nil {
		m.OpenedAt = at(now)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.circuits[name] = &localCircuit{m: m, slots: map[string]int64{}}
}

// Forget drops name.
func (s *LocalStore) Forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.circuits, name)
}

// Get is name's snapshot (the initial one when unknown).
func (s *LocalStore) Get(name string, p Policy, now int64) Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.circuits[name]
	if c == nil {
		c = &localCircuit{m: NewMachine()}
	}
	return c.snapshot(name, p, now)
}

// Allow is cbd's allow: may I call? A half_open grant carries a permit.
func (s *LocalStore) Allow(name string, p Policy, now int64) AllowReply {
	p.MinReporters = 1
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.circuit(name)
	before := c.m.State
	c.m.OnAllow(p, now)
	c.transitioned(before)
	switch c.m.State {
	case StateClosed:
		return AllowReply{Allowed: true, State: StateClosed}
	case StateOpen:
		return AllowReply{State: StateOpen, RetryAfterMs: c.m.RetryAfterMs(p, now)}
	}
	earliest := int64(-1)
	for token, exp := range c.slots {
		if now >= exp {
			delete(c.slots, token)
		} else if earliest < 0 || exp < earliest {
			earliest = exp
		}
	}
	if int64(len(c.slots)) >= p.HalfOpenMax {
		wait := earliest - now
		if wait < 0 {
			wait = 0
		}
		return AllowReply{State: StateHalfOpen, RetryAfterMs: wait}
	}
	s.counter++
	token := fmt.Sprintf("%s-%016x", s.instance, s.counter)
	c.slots[token] = now + p.SlotTTLMs
	return AllowReply{Allowed: true, State: StateHalfOpen, Permit: token, ExpiresAt: now + p.SlotTTLMs}
}

// ReleaseSlot gives a permit back without an outcome.
func (s *LocalStore) ReleaseSlot(name, permit string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.circuits[name]; c != nil {
		delete(c.slots, permit)
	}
}

// Record is cbd's record: the outcome, its permit given back (durationMs <
// 0: none); the snapshot after it.
func (s *LocalStore) Record(name string, o Outcome, p Policy, now, durationMs int64, permit string) Snapshot {
	p.MinReporters = 1
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.circuits[name]
	if c == nil && o == Ignore {
		return (&localCircuit{m: NewMachine()}).snapshot(name, p, now)
	}
	if c == nil {
		c = s.circuit(name)
	}
	if permit != "" {
		delete(c.slots, permit)
	}
	if o != Ignore {
		slow := p.SlowCallMs > 0 && durationMs >= 0 && durationMs >= p.SlowCallMs
		before := c.m.State
		c.m.OnOutcome(p, now, o == Failure, slow, c.windowFor(p))
		c.transitioned(before)
	}
	return c.snapshot(name, p, now)
}

// SetState forces a state (the window emptied).
func (s *LocalStore) SetState(name, state string, p Policy, now int64) (Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.circuit(name)
	if err := c.m.Force(state, now); err != nil {
		return Snapshot{}, err
	}
	if c.window != nil {
		c.window.Reset()
	}
	return c.snapshot(name, p, now), nil
}
