// SPDX-License-Identifier: Apache-2.0

// fallback_test.go — the store policies with cbd killed and SIGSTOPped:
// LOCAL breaks on a private copy seeded from cbd's last snapshot and run
// with the policy cbd reported (here from its config, not the breaker's
// declaration); ALLOW runs calls; REJECT refuses with cbd's error; a hung
// cbd costs one I/O timeout, then is skipped for the timeout backoff; cbd's
// first answer makes it authoritative again.

package cbdclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"cbd.example/cbdclient/internal/cbdtest"
)

// A config whose circuit "payments" opens at 3 failures with a long break.
const fallbackConfig = "[circuit \"payments\"]\nfailure_threshold = 3\nbreak_ms = 600000\n"

// latencyBound is a generous bound (a hang, not a speed check) for calls
// while cbd is stopped.
const latencyBound = 5 * time.Second

func ownBreaker(t *testing.T, d *cbdtest.Daemon, policy StorePolicy, errs *[]string) *Breaker {
	t.Helper()
	c := NewClient(Options{Socket: d.Socket})
	t.Cleanup(func() { c.Close() })
	// Uncached: every call asks cbd (the cached mode with cbd killed is
	// in cache_test.go, as is the cache noticing a SIGSTOPped cbd).
	b, err := NewBreaker("payments", BreakerOptions{Client: c, StorePolicy: policy, Cache: CacheOff,
		OnStoreError: func(err error, op string) {
			var e *Error
			if errors.As(err, &e) {
				*errs = append(*errs, op+":"+e.Code)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLocalFallbackWithCbdKilled(t *testing.T) {
	d := cbdtest.StartT(t, fallbackConfig)
	var errs []string
	b := ownBreaker(t, d, StoreLocal, &errs)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if err := b.Execute(ctx, failing); !errors.Is(err, errBoom) {
			t.Fatal(err)
		}
	}
	d.Kill()
	// The third failure, recorded locally, opens (cbd's failure_threshold
	// 3, seeded count 2; the built-in default would be 5).
	if err := b.Execute(ctx, failing); !errors.Is(err, errBoom) {
		t.Fatalf("call with cbd killed: %v", err)
	}
	if b.State() != StateOpen {
		t.Fatalf("local copy: %s, want open (store errors %v)", b.State(), errs)
	}
	ran := false
	err := b.Execute(ctx, func(context.Context) error { ran = true; return nil })
	var open *CircuitOpenError
	if ran || !errors.As(err, &open) || open.RetryAfter <= 500*time.Second {
		t.Fatalf("local open: ran %v, %v (cbd's break_ms 600000 expected)", ran, err)
	}
	if len(errs) == 0 || errs[0] != "allow:unavailable" {
		t.Fatalf("store errors %v", errs)
	}
	// cbd is back (a fresh one: the circuit is closed there): its first
	// answer is authoritative.
	if err := d.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := b.Execute(ctx, succeeding); err != nil {
		t.Fatalf("cbd back: %v", err)
	}
	if b.State() != StateClosed {
		t.Fatalf("after cbd came back: %s", b.State())
	}
}

func TestAllowAndRejectWithCbdKilled(t *testing.T) {
	d := cbdtest.StartT(t, fallbackConfig)
	var errs []string
	allow := ownBreaker(t, d, StoreAllow, &errs)
	reject := ownBreaker(t, d, StoreReject, &errs)
	ctx := context.Background()
	d.Kill()
	for i := 0; i < 5; i++ {
		if err := allow.Execute(ctx, failing); !errors.Is(err, errBoom) {
			t.Fatalf("ALLOW call %d: %v", i, err)
		}
	}
	if allow.State() != StateClosed {
		t.Fatalf("ALLOW keeps no state: %s", allow.State())
	}
	ran := false
	err := reject.Execute(ctx, func(context.Context) error { ran = true; return nil })
	var e *Error
	if ran || !errors.As(err, &e) || e.Code != CodeUnavailable {
		t.Fatalf("REJECT: ran %v, %v", ran, err)
	}
}

func TestLocalFallbackWithCbdStopped(t *testing.T) {
	d := cbdtest.StartT(t, fallbackConfig)
	var errs []string
	b := ownBreaker(t, d, StoreLocal, &errs)
	ctx := context.Background()
	if err := b.Execute(ctx, succeeding); err != nil {
		t.Fatal(err)
	}
	d.Pause()
	defer d.Resume()
	var worst time.Duration
	for i := 0; i < 3; i++ {
		start := time.Now()
		err := b.Execute(ctx, failing)
		took := time.Since(start)
		if took > worst {
			worst = took
		}
		if !errors.Is(err, errBoom) {
			t.Fatalf("call %d with cbd stopped: %v", i, err)
		}
	}
	if worst > latencyBound {
		t.Fatalf("a call took %v with cbd stopped", worst)
	}
	t.Logf("slowest call with cbd SIGSTOPped: %v (io timeout %v)", worst, DefaultIOTimeout)
	if b.State() != StateOpen {
		t.Fatalf("local copy after 3 failures: %s (store errors %v)", b.State(), errs)
	}
	// One timeout, then cbd skipped for the backoff (or timed out again
	// past it): never a hang.
	if len(errs) == 0 || errs[0] != "allow:timeout" {
		t.Fatalf("store errors %v", errs)
	}
	// Each store error was a timeout or a request skipped in the backoff.
	if n := b.Client().Counters(); n.Timeouts+b.Skipped() != int64(len(errs)) || b.LocalCalls() != 3 {
		t.Fatalf("timeouts %d + skipped %d != store errors %v; local calls %d", n.Timeouts,
			b.Skipped(), errs, b.LocalCalls())
	}
	t.Logf("with cbd stopped: %d timeouts, %d requests skipped", b.Client().Counters().Timeouts, b.Skipped())
	d.Resume()
	time.Sleep(DefaultTimeoutBackoff)
	b2 := ownBreaker(t, d, StoreReject, &errs)
	if _, err := b2.Refresh(ctx); err != nil {
		t.Fatalf("cbd resumed: %v", err)
	}
}

func TestLocalFallbackKeepsHolds(t *testing.T) {
	d := cbdtest.StartT(t, fallbackConfig+"[circuit \"search\"]\nfailure_threshold = 3\n")
	var errs []string
	ctx := context.Background()
	c := NewClient(Options{Socket: d.Socket})
	defer c.Close()
	if _, err := c.SetState(ctx, "payments", StateOpen, SetStateOptions{Hold: true, Reason: "failover"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetState(ctx, "search", StateClosed, SetStateOptions{Hold: true}); err != nil {
		t.Fatal(err)
	}
	payments := ownBreaker(t, d, StoreLocal, &errs)
	search, err := NewBreaker("search", BreakerOptions{Socket: d.Socket, Cache: CacheOff})
	if err != nil {
		t.Fatal(err)
	}
	defer search.Close()
	for _, b := range []*Breaker{payments, search} {
		if _, err := b.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	d.Kill()
	// Held open (no ttl): the local copy stays open, however long.
	if err := payments.Execute(ctx, succeeding); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("held open, cbd killed: %v", err)
	}
	// Held closed: no rule opens it (failure_threshold 3 notwithstanding).
	for i := 0; i < 5; i++ {
		if err := search.Execute(ctx, failing); !errors.Is(err, errBoom) {
			t.Fatalf("held closed, call %d: %v", i, err)
		}
	}
	if search.State() != StateClosed || search.LocalCalls() != 5 {
		t.Fatalf("held closed: %s after %d local calls", search.State(), search.LocalCalls())
	}
}
