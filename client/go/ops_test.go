// SPDX-License-Identifier: Apache-2.0

// ops_test.go — every op against a real cbd: typed results, cbd's error
// code and message on refusals, noreply, reconnection, the socket path
// resolution, and goroutines sharing one Client.

package cbdclient

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestHelloGetAllowRecord(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	name := circuitName(t)
	h, err := c.Hello(ctx, "go-test")
	if err != nil || h.Server != "cbd" || h.Protocol != 3 || h.Version == "" {
		t.Fatalf("hello: %+v %v", h, err)
	}
	g, err := c.Get(ctx, name, Ctx{"failure_threshold": 2, "break_ms": 60000})
	if err != nil || g.Stored || g.Snapshot.State != StateClosed || g.Snapshot.Name != name {
		t.Fatalf("get: %+v %v", g, err)
	}
	a, err := c.Allow(ctx, name, Ctx{"failure_threshold": 2, "break_ms": 60000})
	if err != nil || !a.Allowed || a.State != StateClosed {
		t.Fatalf("allow: %+v %v", a, err)
	}
	s, err := c.Record(ctx, name, Failure, RecordOptions{DurationMs: 12})
	if err != nil || s.FailureCount != 1 || s.LastFailureAt == nil || s.Totals.Failures != 1 {
		t.Fatalf("record: %+v %v", s, err)
	}
	s, err = c.RecordFailure(ctx, name, RecordOptions{DurationMs: -1, Policy: true})
	if err != nil || s.State != StateOpen || s.OpenedAt == nil || s.RetryAfterMs <= 0 {
		t.Fatalf("record_failure: %+v %v", s, err)
	}
	// Asked for (Policy: true): protocol 3 leaves it out otherwise.
	if bm, _ := toInt(s.Policy["failure_threshold"]); bm != 2 {
		t.Fatalf("policy not reported: %v", s.Policy)
	}
	a, err = c.Allow(ctx, name, nil)
	if err != nil || a.Allowed || a.State != StateOpen || a.RetryAfterMs <= 0 {
		t.Fatalf("allow while open: %+v %v", a, err)
	}
	g, err = c.Get(ctx, name, nil)
	if err != nil || !g.Stored || g.Snapshot.Totals.Rejected != 1 {
		t.Fatalf("get stored: %+v %v", g, err)
	}
	s, err = c.RecordSuccess(ctx, name, RecordOptions{DurationMs: -1})
	if err != nil || s.State != StateOpen || s.Totals.Successes != 1 {
		t.Fatalf("record_success while open: %+v %v", s, err)
	}
}

func TestHalfOpenPermitAndSlots(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	name := circuitName(t)
	pol := Ctx{"failure_threshold": 1, "break_ms": 1000, "half_open_max": 1, "now": 1_700_000_000_000}
	if _, err := c.RecordFailure(ctx, name, RecordOptions{DurationMs: -1, Ctx: pol}); err != nil {
		t.Fatal(err)
	}
	later := Ctx{"now": 1_700_000_001_000}
	a, err := c.Allow(ctx, name, later)
	if err != nil || !a.Allowed || a.State != StateHalfOpen || a.Permit == "" || a.ExpiresAt == 0 {
		t.Fatalf("allow after the break: %+v %v", a, err)
	}
	b, err := c.Allow(ctx, name, later)
	if err != nil || b.Allowed || b.State != StateHalfOpen {
		t.Fatalf("second trial: %+v %v", b, err)
	}
	// The permit goes back with the outcome (ignore changes nothing).
	if _, err := c.Record(ctx, name, Ignore, RecordOptions{Permit: a.Permit, DurationMs: -1, Ctx: later}); err != nil {
		t.Fatal(err)
	}
	slot, err := c.AcquireSlot(ctx, name, later)
	if err != nil || !slot.Acquired || slot.Token == "" {
		t.Fatalf("acquire_slot after the permit came back: %+v %v", slot, err)
	}
	rel, err := c.ReleaseSlot(ctx, name, slot.Token, later)
	if err != nil || !rel {
		t.Fatalf("release_slot: %v %v", rel, err)
	}
	cas, err := c.Cas(ctx, name, StateHalfOpen, StateClosed, later)
	if err != nil || !cas.Applied || cas.Snapshot.State != StateClosed {
		t.Fatalf("cas: %+v %v", cas, err)
	}
}

func TestAdminOps(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	name := circuitName(t)
	s, err := c.SetState(ctx, name, StateOpen, SetStateOptions{Hold: true, TTLMs: 600000, Reason: "go test"})
	if err != nil || s.State != StateOpen || s.Hold == nil || s.Hold.Reason == nil ||
		*s.Hold.Reason != "go test" || s.Hold.Until == nil {
		t.Fatalf("set_state hold: %+v %v", s, err)
	}
	a, err := c.Allow(ctx, name, nil)
	if err != nil || a.Allowed {
		t.Fatalf("allow while held open: %+v %v", a, err)
	}
	l, err := c.List(ctx, StateOpen, nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, snap := range l.Circuits {
		found = found || snap.Name == name
	}
	if !found {
		t.Fatalf("list open lacks %s", name)
	}
	r, err := c.Release(ctx, name, nil)
	if err != nil || !r.Released || r.Snapshot.State != StateHalfOpen || r.Snapshot.Hold != nil {
		t.Fatalf("release: %+v %v", r, err)
	}
	s, err = c.SetState(ctx, name, StateClosed, SetStateOptions{})
	if err != nil || s.State != StateClosed {
		t.Fatalf("set_state closed: %+v %v", s, err)
	}
	existed, err := c.Delete(ctx, name)
	if err != nil || !existed {
		t.Fatalf("delete: %v %v", existed, err)
	}
	existed, err = c.Delete(ctx, name)
	if err != nil || existed {
		t.Fatalf("delete again: %v %v", existed, err)
	}
}

func TestRefusalsCarryCodeAndMessage(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	name := circuitName(t)
	_, err := c.SetState(ctx, name, StateHalfOpen, SetStateOptions{Hold: true})
	var e *Error
	if !errors.As(err, &e) || e.Code != "bad_request" || e.Message == "" || e.Op != "set_state" {
		t.Fatalf("half_open hold: %v", err)
	}
	_, err = c.Get(ctx, name, Ctx{"break_ms": -1})
	if !errors.As(err, &e) || e.Code != "bad_request" || !strings.Contains(e.Message, "break_ms") {
		t.Fatalf("bad break_ms: %v", err)
	}
	err = c.Request(ctx, "no_such_op", nil, nil)
	if !errors.As(err, &e) || e.Code != "unknown_op" {
		t.Fatalf("unknown op: %v", err)
	}
	if Unavailable(err) {
		t.Fatal("a refusal is not unavailability")
	}
	// The connection still works after refusals.
	if _, err := c.Hello(ctx, ""); err != nil {
		t.Fatal(err)
	}
}

func TestNoreplyStatsMetrics(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	name := circuitName(t)
	before, err := c.Stats(ctx)
	if err != nil || before.UptimeMs < 0 || before.Raw["limits"] == nil {
		t.Fatalf("stats: %+v %v", before, err)
	}
	for i := 0; i < 3; i++ {
		s, err := c.Record(ctx, name, Success, RecordOptions{DurationMs: 5, NoReply: true})
		if err != nil || s != nil {
			t.Fatalf("noreply record: %+v %v", s, err)
		}
	}
	g, err := c.Get(ctx, name, nil)
	if err != nil || g.Snapshot.Totals.Successes != 3 {
		t.Fatalf("after noreply: %+v %v", g, err)
	}
	after, err := c.Stats(ctx)
	if err != nil || after.NoReply < before.NoReply+3 || after.Ops["record"].Requests < 3 {
		t.Fatalf("stats after: %+v %v", after, err)
	}
	text, err := c.Metrics(ctx)
	if err != nil || !strings.Contains(text, "cbd_up 1") || !strings.Contains(text, name) {
		t.Fatalf("metrics: %v %.200s", err, text)
	}
}

func TestGoroutinesShareAClient(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	name := circuitName(t)
	const workers, each = 8, 50
	pol := Ctx{"failure_threshold": 1_000_000}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if _, err := c.RecordFailure(ctx, name, RecordOptions{DurationMs: -1, Ctx: pol}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	g, err := c.Get(ctx, name, nil)
	if err != nil || g.Snapshot.FailureCount != workers*each {
		t.Fatalf("failure_count %d, want %d (%v)", g.Snapshot.FailureCount, workers*each, err)
	}
}

func TestReconnectAndSocketPath(t *testing.T) {
	d := sharedCbd(t)
	t.Setenv("CBD_SOCKET", d.Socket)
	c := NewClient(Options{IOTimeout: 2e9, ConnectTimeout: 2e9})
	defer c.Close()
	if c.Socket != d.Socket {
		t.Fatalf("socket %q, want $CBD_SOCKET %q", c.Socket, d.Socket)
	}
	if ResolveSocket("/x.sock") != "/x.sock" {
		t.Fatal("an argument beats $CBD_SOCKET")
	}
	t.Setenv("CBD_SOCKET", "")
	if ResolveSocket("") != DefaultSocket {
		t.Fatal("default socket")
	}
	ctx := context.Background()
	if _, err := c.Hello(ctx, ""); err != nil {
		t.Fatal(err)
	}
	c.Close() // dropped: the next call reconnects
	if _, err := c.Hello(ctx, ""); err != nil {
		t.Fatal(err)
	}
	bad := NewClient(Options{Socket: d.Dir + "/none.sock"})
	_, err := bad.Hello(ctx, "")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeUnavailable || !Unavailable(err) {
		t.Fatalf("no socket: %v", err)
	}
}

func TestCallerContextIsNotCbdsFault(t *testing.T) {
	c := testClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Hello(ctx, "")
	if !errors.Is(err, context.Canceled) || Unavailable(err) {
		t.Fatalf("cancelled request: %v", err)
	}
	if _, err := c.Hello(context.Background(), ""); err != nil {
		t.Fatal(err)
	}
}

func TestClientCountersAndReplyLimit(t *testing.T) {
	d := sharedCbd(t)
	ctx := context.Background()
	name := circuitName(t)
	c := NewClient(Options{Socket: d.Socket, IOTimeout: 2e9, ConnectTimeout: 2e9, MaxReplyBytes: 160})
	defer c.Close()
	if _, err := c.Hello(ctx, ""); err != nil {
		t.Fatal(err)
	}
	// A snapshot is far longer than 160 bytes (hello's reply is not).
	_, err := c.Get(ctx, name, nil)
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeUnavailable || !strings.Contains(e.Message, "160 bytes") {
		t.Fatalf("a reply past MaxReplyBytes: %v", err)
	}
	// Declaring another policy for a live circuit is a policy_conflict.
	big := NewClient(Options{Socket: d.Socket, IOTimeout: 2e9, ConnectTimeout: 2e9})
	defer big.Close()
	if _, err := big.Allow(ctx, name, Ctx{"failure_threshold": 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := big.Allow(ctx, name, Ctx{"failure_threshold": 4}); err != nil {
		t.Fatal(err)
	}
	n := c.Counters()
	if n.Requests != 2 || n.Connects != 1 || n.RepliesTooLong != 1 || n.Unavailable != 1 {
		t.Fatalf("counters %+v", n)
	}
	if got := big.Counters(); got.PolicyConflicts != 1 || got.Requests != 2 {
		t.Fatalf("counters %+v", got)
	}
}
