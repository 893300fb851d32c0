// SPDX-License-Identifier: Apache-2.0

// breaker_test.go — the Breaker against a real cbd: Execute trips the
// circuit, ErrCircuitOpen with RetryAfter, the fallback, state-change
// callbacks, the duration reported (slow calls), half-open permits handed
// back after a failure, a panic and a cancelled context.

package cbdclient

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

var errBoom = errors.New("boom")

type changes struct {
	mu  sync.Mutex
	log []string
}

func (c *changes) note(name, from, to string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, from+">"+to)
}

func (c *changes) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := ""
	for _, l := range c.log {
		s += l + " "
	}
	return s
}

// virtualClock is ms since the epoch, advanced by the test.
type virtualClock struct{ ms int64 }

func (v *virtualClock) now() int64       { return atomic.LoadInt64(&v.ms) }
func (v *virtualClock) advance(ms int64) { atomic.AddInt64(&v.ms, ms) }
func newVirtualClock() *virtualClock     { return &virtualClock{ms: 1_700_000_000_000} }
func failing(context.Context) error      { return errBoom }
func succeeding(context.Context) error   { return nil }

func newTestBreaker(t *testing.T, opts BreakerOptions) *Breaker {
	t.Helper()
	if opts.Client == nil {
		opts.Client = testClient(t)
	}
	b, err := NewBreaker(circuitName(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBreakerTripsAndFallsBack(t *testing.T) {
	var ch changes
	// Uncached: each outcome's reply says the state at once (the cached
	// mode learns it one event later: cache_test.go).
	b := newTestBreaker(t, BreakerOptions{Policy: Ctx{"failure_threshold": 3, "break_ms": 60000},
		OnStateChange: ch.note, Cache: CacheOff})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if err := b.Execute(ctx, failing); !errors.Is(err, errBoom) {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if b.State() != StateOpen || ch.String() != "closed>open " {
		t.Fatalf("state %s, changes %q", b.State(), ch.String())
	}
	ran := false
	err := b.Execute(ctx, func(context.Context) error { ran = true; return nil })
	var open *CircuitOpenError
	if ran || !errors.Is(err, ErrCircuitOpen) || !errors.As(err, &open) || open.RetryAfter <= 0 ||
		open.RetryAfter > time.Minute || open.Name != b.Name {
		t.Fatalf("open circuit: ran %v, %v", ran, err)
	}
	err = b.ExecuteWithFallback(ctx, succeeding, func(_ context.Context, err error) error {
		if !errors.Is(err, ErrCircuitOpen) {
			t.Errorf("fallback got %v", err)
		}
		return errors.New("from the fallback")
	})
	if err == nil || err.Error() != "from the fallback" {
		t.Fatalf("fallback: %v", err)
	}
	v, err := Call(ctx, b, func(context.Context) (int, error) { return 7, nil })
	if v != 0 || !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("Call while open: %v %v", v, err)
	}
}

func TestBreakerHalfOpenPermitsHandedBack(t *testing.T) {
	clock := newVirtualClock()
	var ch changes
	b := newTestBreaker(t, BreakerOptions{Clock: clock.now, OnStateChange: ch.note,
		Policy: Ctx{"failure_threshold": 1, "success_threshold": 1, "break_ms": 1000, "half_open_max": 1}})
	ctx := context.Background()
	_ = b.Execute(ctx, failing)
	clock.advance(1000)
	// A panic in the trial call hands the permit back.
	func() {
		defer func() {
			if r := recover(); r != "trial panicked" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_ = b.Execute(ctx, func(context.Context) error { panic("trial panicked") })
	}()
	// A cancelled trial too (outcome ignore: still half_open).
	cctx, cancel := context.WithCancel(ctx)
	err := b.Execute(cctx, func(c context.Context) error { cancel(); return c.Err() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled trial: %v", err)
	}
	g, err := b.Client().Get(ctx, b.Name, Ctx{"now": clock.now()})
	if err != nil || g.Snapshot.State != StateHalfOpen || g.Snapshot.Totals.Ignored != 2 {
		t.Fatalf("after panic and cancel: %+v %v", g, err)
	}
	st, err := b.Client().Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// With half_open_max 1, this trial only runs if both permits came back.
	if err := b.Execute(ctx, succeeding); err != nil {
		t.Fatalf("trial after hand-backs: %v (slots held %d)", err, st.Slots)
	}
	if b.State() != StateClosed || ch.String() != "closed>open open>half_open half_open>closed " {
		t.Fatalf("state %s, changes %q", b.State(), ch.String())
	}
}

func TestBreakerReportsDuration(t *testing.T) {
	b := newTestBreaker(t, BreakerOptions{Policy: Ctx{"trip": "rate", "window_size": 10,
		"minimum_calls": 10, "slow_call_ms": 20}})
	ctx := context.Background()
	if err := b.Execute(ctx, func(context.Context) error { time.Sleep(30 * time.Millisecond); return nil }); err != nil {
		t.Fatal(err)
	}
	g, err := b.Client().Get(ctx, b.Name, nil)
	if err != nil || g.Snapshot.Totals.Slow != 1 || g.Snapshot.Window == nil || g.Snapshot.Window.Slow != 1 {
		t.Fatalf("a 30 ms call with slow_call_ms 20: %+v %v", g.Snapshot.Totals, err)
	}
}

func TestBreakerClassifier(t *testing.T) {
	errNotFound := errors.New("not found")
	// Uncached: cbd's totals are read right after the calls.
	b := newTestBreaker(t, BreakerOptions{Policy: Ctx{"failure_threshold": 1}, Cache: CacheOff,
		Classify: func(err error) Outcome {
			switch {
			case errors.Is(err, errNotFound):
				return Success
			case errors.Is(err, errBoom):
				return Ignore
			}
			return DefaultClassify(err)
		}})
	ctx := context.Background()
	for _, e := range []error{errNotFound, errBoom, errNotFound} {
		if err := b.Execute(ctx, func(context.Context) error { return e }); err != e {
			t.Fatalf("the call's own error comes back: %v", err)
		}
	}
	g, err := b.Client().Get(ctx, b.Name, nil)
	if err != nil || g.Snapshot.State != StateClosed || g.Snapshot.Totals.Successes != 2 ||
		g.Snapshot.Totals.Ignored != 1 {
		t.Fatalf("classified: %+v %v", g.Snapshot.Totals, err)
	}
	if err := b.Execute(ctx, func(context.Context) error { return errors.New("other") }); err == nil {
		t.Fatal("no error")
	}
	if b.State() != StateOpen {
		t.Fatalf("an unclassified error is a failure: %s", b.State())
	}
}

func TestBreakerOptionsChecked(t *testing.T) {
	if _, err := NewBreaker("", BreakerOptions{}); err == nil {
		t.Fatal("empty name accepted")
	}
	if _, err := NewBreaker("x", BreakerOptions{Policy: Ctx{"failure_treshold": 3}}); err == nil {
		t.Fatal("misspelt policy key accepted")
	}
	if _, err := NewBreaker("x", BreakerOptions{Policy: Ctx{"preset": "nope"}}); err == nil {
		t.Fatal("unknown preset accepted")
	}
}

func TestBreakerOneTrialAmongGoroutines(t *testing.T) {
	clock := newVirtualClock()
	b := newTestBreaker(t, BreakerOptions{Clock: clock.now,
		Policy: Ctx{"failure_threshold": 1, "success_threshold": 1, "break_ms": 1000, "half_open_max": 1}})
	ctx := context.Background()
	_ = b.Execute(ctx, failing)
	clock.advance(1000)
	const n = 16
	release := make(chan struct{})
	results := make(chan error, n)
	var ran int64
	for i := 0; i < n; i++ {
		go func() {
			results <- b.Execute(ctx, func(context.Context) error {
				atomic.AddInt64(&ran, 1)
				<-release
				return nil
			})
		}()
	}
	refused := 0
	timeout := time.After(10 * time.Second)
	for refused < n-1 {
		select {
		case err := <-results:
			if !errors.Is(err, ErrCircuitOpen) {
				t.Fatalf("a second trial: %v", err)
			}
			refused++
		case <-timeout:
			close(release)
			t.Fatalf("only %d refusals", refused)
		}
	}
	close(release)
	select {
	case err := <-results:
		if err != nil {
			t.Fatalf("the trial: %v", err)
		}
	case <-timeout:
		t.Fatal("the trial never returned")
	}
	if atomic.LoadInt64(&ran) != 1 || b.State() != StateClosed {
		t.Fatalf("%d trials ran, state %s", ran, b.State())
	}
}

// A classifier written the natural way ("ignore ErrNotFound, everything
// else is a failure") is never asked about a success: five successful
// calls are five successes, through Execute and through Retry.
func TestSuccessNeverClassified(t *testing.T) {
	errNotFound := errors.New("not found")
	asked := 0
	natural := func(err error) Outcome {
		asked++
		if errors.Is(err, errNotFound) {
			return Ignore
		}
		return Failure
	}
	ctx := context.Background()
	for _, viaRetry := range []bool{false, true} {
		b := newTestBreaker(t, BreakerOptions{Policy: Ctx{"failure_threshold": 3}, Cache: CacheOff,
			Classify: natural})
		r := &Retry{Breaker: b, Attempts: 1}
		for i := 0; i < 5; i++ {
			var err error
			if viaRetry {
				err = r.Do(ctx, succeeding)
			} else {
				err = b.Execute(ctx, succeeding)
			}
			if err != nil {
				t.Fatalf("retry %v, call %d: %v", viaRetry, i, err)
			}
		}
		g, err := b.Client().Get(ctx, b.Name, nil)
		if err != nil || g.Snapshot.State != StateClosed || g.Snapshot.Totals.Successes != 5 ||
			g.Snapshot.Totals.Failures != 0 || asked != 0 {
			t.Fatalf("retry %v: %+v %s asked %d %v", viaRetry, g.Snapshot.Totals, g.Snapshot.State, asked, err)
		}
	}
}
