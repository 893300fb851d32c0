// SPDX-License-Identifier: Apache-2.0

// retry_test.go — Retry in virtual time (injected clock, sleep and random
// source): backoff bounds with and without jitter, RetryOn, per-attempt
// timeouts, hooks, and against a real cbd the breaker asked before every
// attempt, an open circuit ending the retries at once.

package cbdclient

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

// virtualTime is a clock the sleeps and the attempts move.
type virtualTime struct {
	t      time.Time
	slept  []time.Duration
	random float64
}

func newVirtualTime() *virtualTime {
	return &virtualTime{t: time.Unix(1_700_000_000, 0), random: 0.5}
}

func (v *virtualTime) now() time.Time { return v.t }
func (v *virtualTime) sleep(_ context.Context, d time.Duration) error {
	v.slept = append(v.slept, d)
	v.t = v.t.Add(d)
	return nil
}
func (v *virtualTime) rand() float64 { return v.random }

func (v *virtualTime) retry(r Retry) *Retry {
	r.Now, r.Sleep, r.Rand = v.now, v.sleep, v.rand
	return &r
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestRetryBackoff(t *testing.T) {
	vt := newVirtualTime()
	var retries []int
	r := vt.retry(Retry{Attempts: 5, Base: ms(100), Max: ms(300),
		Hooks: Hooks{OnRetry: func(n int, err error, d time.Duration) { retries = append(retries, n) }}})
	calls := 0
	err := r.Do(context.Background(), func(context.Context) error { calls++; return errBoom })
	if !errors.Is(err, errBoom) || calls != 5 {
		t.Fatalf("%d calls, %v", calls, err)
	}
	// Full jitter at 0.5 of min(max, base * 2^(n-1)).
	if want := []time.Duration{ms(50), ms(100), ms(150), ms(150)}; !reflect.DeepEqual(vt.slept, want) {
		t.Fatalf("slept %v, want %v", vt.slept, want)
	}
	if !reflect.DeepEqual(retries, []int{1, 2, 3, 4}) {
		t.Fatalf("OnRetry %v", retries)
	}
	r.NoJitter = true
	for n, want := range map[int]time.Duration{1: ms(100), 2: ms(200), 3: ms(300), 80: ms(300)} {
		if got := r.Delay(n); got != want {
			t.Errorf("Delay(%d) = %v, want %v", n, got, want)
		}
	}
	r.NoJitter = false
	vt.random = 0
	if r.Delay(3) != 0 {
		t.Fatal("full jitter reaches 0")
	}
}

func TestRetrySucceedsAndStops(t *testing.T) {
	vt := newVirtualTime()
	r := vt.retry(Retry{Attempts: 4})
	calls := 0
	v, err := Retrying(context.Background(), r, func(context.Context) (string, error) {
		calls++
		if calls < 3 {
			return "", errBoom
		}
		return "ok", nil
	})
	if v != "ok" || err != nil || calls != 3 || len(vt.slept) != 2 {
		t.Fatalf("%q %v after %d calls, slept %v", v, err, calls, vt.slept)
	}
	errFatal := errors.New("fatal")
	r.RetryOn = func(err error) bool { return !errors.Is(err, errFatal) }
	calls = 0
	err = r.Do(context.Background(), func(context.Context) error { calls++; return errFatal })
	if !errors.Is(err, errFatal) || calls != 1 {
		t.Fatalf("RetryOn false: %d calls, %v", calls, err)
	}
}

func TestRetryAttemptTimeout(t *testing.T) {
	vt := newVirtualTime()
	var timeouts, failures []int
	r := vt.retry(Retry{Attempts: 2, AttemptTimeout: ms(200), Hooks: Hooks{
		OnTimeout: func(n int) { timeouts = append(timeouts, n) },
		OnFailure: func(n int, err error) { failures = append(failures, n) }}})
	calls := 0
	err := r.Do(context.Background(), func(ctx context.Context) error {
		calls++
		if _, ok := ctx.Deadline(); !ok {
			t.Error("the attempt's context has no deadline")
		}
		vt.t = vt.t.Add(ms(250)) // the attempt runs past its timeout
		return nil               // ... and its late result does not count
	})
	var te *AttemptTimeoutError
	if !errors.Is(err, ErrAttemptTimeout) || !errors.As(err, &te) || te.Attempt != 2 || calls != 2 {
		t.Fatalf("%d calls, %v", calls, err)
	}
	if !reflect.DeepEqual(timeouts, []int{1, 2}) || !reflect.DeepEqual(failures, []int{1, 2}) {
		t.Fatalf("hooks: timeouts %v failures %v", timeouts, failures)
	}
	// A real deadline: the attempt's context is cancelled at it.
	r = &Retry{Attempts: 1, AttemptTimeout: ms(20)}
	err = r.Do(context.Background(), func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Second):
			return nil
		}
	})
	if !errors.Is(err, ErrAttemptTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("real deadline: %v", err)
	}
}

func TestRetryWithBreaker(t *testing.T) {
	vt := newVirtualTime()
	clock := newVirtualClock()
	b := newTestBreaker(t, BreakerOptions{Clock: clock.now,
		Policy: Ctx{"failure_threshold": 2, "success_threshold": 1, "break_ms": 1000}})
	var opened []time.Duration
	var halfOpen, closed int
	r := vt.retry(Retry{Breaker: b, Attempts: 5, Hooks: Hooks{
		OnCircuitOpen:     func(d time.Duration) { opened = append(opened, d) },
		OnCircuitHalfOpen: func() { halfOpen++ },
		OnCircuitClosed:   func() { closed++ }}})
	calls := 0
	err := r.Do(context.Background(), func(context.Context) error { calls++; return errBoom })
	// Two failures open the circuit; the third attempt is refused and ends
	// the retries at once.
	if !errors.Is(err, ErrCircuitOpen) || calls != 2 {
		t.Fatalf("%d calls, %v", calls, err)
	}
	if len(opened) != 2 || opened[0] != time.Second || opened[1] != time.Second {
		t.Fatalf("OnCircuitOpen %v (opened by attempt 2, then the refusal)", opened)
	}
	g, err := b.Client().Get(context.Background(), b.Name, Ctx{"now": clock.now()})
	if err != nil || g.Snapshot.Totals.Failures != 2 || g.Snapshot.Totals.Rejected != 1 {
		t.Fatalf("every attempt reported: %+v %v", g.Snapshot.Totals, err)
	}
	// After the break: one trial succeeds and closes; the fallback is not needed.
	clock.advance(1000)
	r.Fallback = func(context.Context, error) error { return errors.New("fallback") }
	calls = 0
	if err := r.Do(context.Background(), func(context.Context) error { calls++; return nil }); err != nil || calls != 1 {
		t.Fatalf("trial: %d calls, %v", calls, err)
	}
	if halfOpen != 1 || closed != 1 || b.State() != StateClosed {
		t.Fatalf("half_open %d closed %d state %s", halfOpen, closed, b.State())
	}
	// Open again: the fallback answers.
	_ = b.Force(context.Background(), StateOpen)
	if err := r.Do(context.Background(), succeeding); err == nil || err.Error() != "fallback" {
		t.Fatalf("fallback: %v", err)
	}
}
