// SPDX-License-Identifier: Apache-2.0

// bulkhead_test.go — the bulkhead and the retry budget (protocol 3 §2, §3)
// through the Breaker and Retry, against a real cbd: never more than N
// calls in flight across processes and goroutines (a counting server fails
// on N+1), a killed process's ticket handed to a waiter, Wait expiry
// (*BulkheadFullError), the ticket back on an error, a panic and a
// cancelled context (while the call runs and while it waits), cached
// breakers taking the round trip on a limited circuit, retries marked and
// stopped by the retry budget (*RetryBudgetError), exact totals. The
// worker processes are this test binary, run again with workerEnv set.

package cbdclient

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cbd.example/cbdclient/internal/cbdtest"
)

// workerEnv names what a worker process does: "calls SOCK NAME LIMIT
// GOROUTINES CALLS SERVER" or "hold SOCK NAME".
const workerEnv = "CBDCLIENT_TEST_WORKER"

// waitBound bounds every wait for a condition.
const waitBound = 10 * time.Second

func runWorker(spec string) int {
	f := strings.Fields(spec)
	ctx := context.Background()
	c := NewClient(Options{Socket: f[1], ConnectTimeout: 2 * time.Second, IOTimeout: 2 * time.Second})
	defer c.Close()
	switch f[0] {
	case "hold":
		b, err := NewBreaker(f[2], BreakerOptions{Client: c, Cache: CacheOff,
			Policy: Ctx{"max_concurrent": 1}})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		p, err := b.Acquire(ctx)
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		fmt.Println("held", p.Token)
		time.Sleep(10 * time.Minute)
		return 0
	case "calls":
		limit, _ := strconv.Atoi(f[3])
		goroutines, _ := strconv.Atoi(f[4])
		calls, _ := strconv.Atoi(f[5])
		b, err := NewBreaker(f[2], BreakerOptions{Client: c, Wait: 10 * time.Second,
			Policy: Ctx{"max_concurrent": limit}})
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
		var failed int64
		var first atomic.Value
		var wg sync.WaitGroup
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < calls; i++ {
					if err := b.Execute(ctx, func(context.Context) error { return hit(f[6]) }); err != nil {
						atomic.AddInt64(&failed, 1)
						first.Store(err.Error())
					}
				}
			}()
		}
		wg.Wait()
		fmt.Printf("errors %d %v cached %d\n", failed, first.Load(), b.CachedCalls())
		if failed > 0 {
			return 1
		}
		return 0
	}
	return 2
}

// hit is one request to the counting server.
func hit(path string) error {
	conn, err := net.DialTimeout("unix", path, 30*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte("x")); err != nil {
		return err
	}
	buf := make([]byte, 2)
	if _, err := conn.Read(buf); err != nil || string(buf) != "ok" {
		return fmt.Errorf("bad answer %q: %v", buf, err)
	}
	return nil
}

// countingServer counts the requests in flight: each connection is one
// request, held a little and answered "ok"; over counts requests that
// found limit already in flight.
type countingServer struct {
	path                   string
	ln                     net.Listener
	limit                  int64
	now, peak, over, total int64
}

func newCountingServer(t *testing.T, limit int64) *countingServer {
	s := &countingServer{path: filepath.Join(t.TempDir(), "count.sock"), limit: limit}
	ln, err := net.Listen("unix", s.path)
	if err != nil {
		t.Fatal(err)
	}
	s.ln = ln
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				buf := make([]byte, 1)
				if _, err := conn.Read(buf); err != nil {
					return
				}
				n := atomic.AddInt64(&s.now, 1)
				atomic.AddInt64(&s.total, 1)
				if n > s.limit {
					atomic.AddInt64(&s.over, 1)
				}
				for {
					p := atomic.LoadInt64(&s.peak)
					if n <= p || atomic.CompareAndSwapInt64(&s.peak, p, n) {
						break
					}
				}
				time.Sleep(10 * time.Millisecond)
				atomic.AddInt64(&s.now, -1)
				_, _ = conn.Write([]byte("ok"))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return s
}

func worker(t *testing.T, spec string) (*exec.Cmd, *bufio.Reader) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+spec)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, bufio.NewReader(out)
}

func snapshotOf(t *testing.T, c *Client, name string) Snapshot {
	t.Helper()
	r, err := c.Get(context.Background(), name, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r.Snapshot
}

func inFlight(t *testing.T, c *Client, name string) int64 {
	t.Helper()
	s := snapshotOf(t, c, name)
	if s.InFlight == nil {
		t.Fatalf("snapshot of %s has no in_flight", name)
	}
	return *s.InFlight
}

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", waitBound, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waiters(t *testing.T, c *Client) int64 {
	s, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s.Waiters
}

func TestBulkheadNeverMoreThanNAcrossProcesses(t *testing.T) {
	d := sharedCbd(t)
	c := testClient(t)
	name := circuitName(t)
	const limit, procs, goroutines, calls = 3, 3, 4, 10
	srv := newCountingServer(t, limit)
	var cmds []*exec.Cmd
	var outs []*bufio.Reader
	for i := 0; i < procs; i++ {
		cmd, out := worker(t, fmt.Sprintf("calls %s %s %d %d %d %s", d.Socket, name, limit,
			goroutines, calls, srv.path))
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	for i, cmd := range cmds {
		line, _ := outs[i].ReadString('\n')
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v: %s", i, err, line)
		}
		if !strings.Contains(line, "cached 0") {
			t.Errorf("a ticket was granted from a cache: %s", line)
		}
	}
	if got := atomic.LoadInt64(&srv.total); got != procs*goroutines*calls {
		t.Fatalf("server saw %d calls, want %d", got, procs*goroutines*calls)
	}
	if over := atomic.LoadInt64(&srv.over); over != 0 {
		t.Fatalf("%d calls in flight at once, limit %d", srv.peak, limit)
	}
	s := snapshotOf(t, c, name)
	if *s.InFlight != 0 || s.Totals.Successes != procs*goroutines*calls || s.Totals.RejectedConcurrency != 0 {
		t.Fatalf("snapshot: in_flight %d, totals %+v", *s.InFlight, *s.Totals)
	}
}

func TestBulkheadKilledProcessTicketGoesToAWaiter(t *testing.T) {
	d := sharedCbd(t)
	c := testClient(t)
	name := circuitName(t)
	cmd, out := worker(t, fmt.Sprintf("hold %s %s", d.Socket, name))
	line, _ := out.ReadString('\n')
	if !strings.HasPrefix(line, "held ") {
		t.Fatalf("holder: %q", line)
	}
	if n := inFlight(t, c, name); n != 1 {
		t.Fatalf("in_flight %d, want 1", n)
	}
	b, err := NewBreaker(name, BreakerOptions{Client: testClient(t), Cache: CacheOff,
		Wait: 30 * time.Second, Policy: Ctx{"max_concurrent": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	type res struct {
		p   *Permit
		err error
	}
	got := make(chan res, 1)
	go func() {
		p, err := b.Acquire(context.Background())
		got <- res{p, err}
	}()
	until(t, "the acquire waits", func() bool { return waiters(t, c) == 1 })
	_ = cmd.Process.Kill()
	r := <-got
	if r.err != nil || r.p.Token == "" {
		t.Fatalf("the waiter did not get the freed ticket: %v", r.err)
	}
	if n := inFlight(t, c, name); n != 1 {
		t.Fatalf("in_flight %d, want 1", n)
	}
	_ = b.Report(r.p, Success, -1)
	s := snapshotOf(t, c, name)
	if *s.InFlight != 0 || s.Totals.RejectedConcurrency != 0 {
		t.Fatalf("in_flight %d, totals %+v", *s.InFlight, *s.Totals)
	}
}

func TestBulkheadWaitExpiryIsBulkheadFull(t *testing.T) {
	c := testClient(t)
	name := circuitName(t)
	ctx := context.Background()
	holder, _ := NewBreaker(name, BreakerOptions{Client: c, Cache: CacheOff, Policy: Ctx{"max_concurrent": 1}})
	p, err := holder.Acquire(ctx)
	if err != nil || p.Token == "" {
		t.Fatalf("holder: %v", err)
	}
	for _, wait := range []time.Duration{0, 50 * time.Millisecond} {
		b, _ := NewBreaker(name, BreakerOptions{Client: testClient(t), Wait: wait,
			Policy: Ctx{"max_concurrent": 1}})
		err := b.Execute(ctx, func(context.Context) error {
			t.Error("ran without a ticket")
			return nil
		})
		var full *BulkheadFullError
		if !errors.As(err, &full) || !errors.Is(err, ErrRefused) || !errors.Is(err, ErrBulkheadFull) ||
			errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("wait %v: %v, want a *BulkheadFullError", wait, err)
		}
		if full.InFlight != 1 || full.RetryAfter != 0 || full.State != StateClosed {
			t.Fatalf("%+v", full)
		}
		if after, ok := RetryAfter(err); !ok || after != 0 {
			t.Fatalf("RetryAfter: %v %v", after, ok)
		}
		b.Close()
	}
	fb, _ := NewBreaker(name, BreakerOptions{Client: c, Cache: CacheOff, Policy: Ctx{"max_concurrent": 1},
		Fallback: func(_ context.Context, err error) error { return fmt.Errorf("fallback: %w", err) }})
	if err := fb.Execute(ctx, func(context.Context) error { return nil }); !errors.Is(err, ErrBulkheadFull) ||
		!strings.HasPrefix(err.Error(), "fallback: ") {
		t.Fatalf("fallback: %v", err)
	}
	_ = holder.Report(p, Success, -1)
	if err := fb.Execute(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	s := snapshotOf(t, c, name)
	if *s.InFlight != 0 || s.Totals.RejectedConcurrency != 3 || s.Totals.Rejected != 0 || s.State != StateClosed {
		t.Fatalf("in_flight %d, state %s, totals %+v", *s.InFlight, s.State, *s.Totals)
	}
}

func TestBulkheadOpenIsNotBulkheadFull(t *testing.T) {
	c := testClient(t)
	name := circuitName(t)
	ctx := context.Background()
	b, _ := NewBreaker(name, BreakerOptions{Client: c, Cache: CacheOff,
		Policy: Ctx{"max_concurrent": 2, "failure_threshold": 1}})
	_ = b.Execute(ctx, func(context.Context) error { return errors.New("down") })
	err := b.Execute(ctx, func(context.Context) error { return nil })
	var open *CircuitOpenError
	if !errors.As(err, &open) || open.Reason != "open" || open.RetryAfter <= 0 || errors.Is(err, ErrBulkheadFull) {
		t.Fatalf("%v", err)
	}
	if n := inFlight(t, c, name); n != 0 {
		t.Fatalf("in_flight %d", n)
	}
}

func TestBulkheadTicketBackOnErrorPanicAndCancel(t *testing.T) {
	c := testClient(t)
	name := circuitName(t)
	b, _ := NewBreaker(name, BreakerOptions{Client: testClient(t), Wait: 30 * time.Second,
		Policy: Ctx{"max_concurrent": 1}})
	defer b.Close()
	ctx := context.Background()
	_ = b.Execute(ctx, func(context.Context) error {
		if n := inFlight(t, c, name); n != 1 {
			t.Errorf("in_flight %d while running", n)
		}
		return errors.New("boom")
	})
	if n := inFlight(t, c, name); n != 0 {
		t.Fatalf("in_flight %d after an error", n)
	}
	func() {
		defer func() { _ = recover() }()
		_ = b.Execute(ctx, func(context.Context) error { panic("oops") })
	}()
	if n := inFlight(t, c, name); n != 0 {
		t.Fatalf("in_flight %d after a panic", n)
	}
	// Cancelled while running: the call returns the context's error.
	cctx, cancel := context.WithCancel(ctx)
	running := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- b.Execute(cctx, func(ctx context.Context) error {
			close(running)
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	<-running
	// Cancelled while waiting for the ticket the first call holds.
	wctx, wcancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		waited <- b.Execute(wctx, func(context.Context) error {
			t.Error("ran after its cancel")
			return nil
		})
	}()
	until(t, "the second call waits", func() bool { return waiters(t, c) == 1 })
	wcancel()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting call: %v", err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("running call: %v", err)
	}
	until(t, "every ticket back", func() bool { return inFlight(t, c, name) == 0 })
	s := snapshotOf(t, c, name)
	// The error is a failure; the panic, the cancelled run
	// (DefaultClassify ignores context.Canceled) and the late grant are
	// ignored.
	if s.Totals.Failures != 1 || s.Totals.Ignored != 3 {
		t.Fatalf("totals %+v", *s.Totals)
	}
}

func TestBulkheadCachedBreakerTakesTheRoundTrip(t *testing.T) {
	c := testClient(t)
	name := circuitName(t)
	own := NewClient(Options{Socket: c.Socket, ConnectTimeout: 2 * time.Second, IOTimeout: 2 * time.Second})
	defer own.Close()
	b, _ := NewBreaker(name, BreakerOptions{Client: own, Policy: Ctx{"max_concurrent": 2}})
	if !b.Cached() {
		t.Fatal("not cached")
	}
	for i := 0; i < 20; i++ {
		if err := b.Execute(context.Background(), func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if b.CachedCalls() != 0 {
		t.Fatalf("%d calls granted from the cache", b.CachedCalls())
	}
	s := snapshotOf(t, c, name)
	if s.Totals.Successes != 20 || *s.InFlight != 0 {
		t.Fatalf("totals %+v", *s.Totals)
	}
}

func TestBulkheadLimitFromTheConfigHonouredByACachedBreaker(t *testing.T) {
	if cbdtest.Binary() == "" {
		t.Skip("CBD_BINARY is not set")
	}
	d := cbdtest.StartT(t, "[circuit \"cfg\"]\nmax_concurrent = 1\n")
	c := NewClient(Options{Socket: d.Socket, ConnectTimeout: 2 * time.Second, IOTimeout: 2 * time.Second})
	defer c.Close()
	b, _ := NewBreaker("cfg", BreakerOptions{Client: c}) // declares nothing: cbd's policy says 1
	ctx := context.Background()
	if err := b.Execute(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	held, err := b.Acquire(ctx)
	if err != nil || held.Token == "" {
		t.Fatalf("%v", err)
	}
	if _, err := b.Acquire(ctx); !errors.Is(err, ErrBulkheadFull) {
		t.Fatalf("%v, want bulkhead full", err)
	}
	_ = b.Report(held, Success, -1)
	if b.CachedCalls() != 0 {
		t.Fatalf("%d calls granted from the cache", b.CachedCalls())
	}
	s := snapshotOf(t, c, "cfg")
	if *s.InFlight != 0 || s.Totals.RejectedConcurrency != 1 {
		t.Fatalf("in_flight %d, totals %+v", *s.InFlight, *s.Totals)
	}
}

const fixedNow = int64(1_800_000_000_000)

func TestRetryMarksRetriesAndStopsAtTheBudget(t *testing.T) {
	c := testClient(t)
	name := circuitName(t)
	down := errors.New("down")
	// 10 retries in 10 s (retry_min_per_s 1), 0 % of first attempts; the
	// errors are ignored so the breaker stays closed.
	b, _ := NewBreaker(name, BreakerOptions{Client: c, Clock: func() int64 { return fixedNow },
		Classify: func(error) Outcome { return Ignore },
		Policy:   Ctx{"retry_budget_percent": 0, "retry_min_per_s": 1}})
	r := Retry{Breaker: b, Attempts: 3, Sleep: func(context.Context, time.Duration) error { return nil }}
	calls := 0
	var outcomes []string
	for i := 0; i < 8; i++ {
		err := r.Do(context.Background(), func(context.Context) error {
			calls++
			return down
		})
		var budget *RetryBudgetError
		switch {
		case errors.As(err, &budget):
			if budget.RetryAfter <= 0 || !errors.Is(err, ErrRefused) {
				t.Fatalf("%+v", budget)
			}
			outcomes = append(outcomes, "budget")
		case errors.Is(err, down):
			outcomes = append(outcomes, "failed")
		default:
			t.Fatalf("run %d: %v", i, err)
		}
	}
	if want := "failed failed failed failed failed budget budget budget"; strings.Join(outcomes, " ") != want {
		t.Fatalf("outcomes %v", outcomes)
	}
	if calls != 5*3+3 {
		t.Fatalf("%d calls", calls)
	}
	g, err := c.Get(context.Background(), name, Ctx{"now": fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	tot := g.Snapshot.Totals
	if tot.Retries != 10 || tot.RejectedRetry != 3 || tot.Rejected != 0 || tot.RejectedConcurrency != 0 ||
		tot.Ignored != int64(calls) {
		t.Fatalf("totals %+v", *tot)
	}
}

func TestRetryOnACachedBreakerMarksRetries(t *testing.T) {
	c := testClient(t)
	name := circuitName(t)
	own := NewClient(Options{Socket: c.Socket, ConnectTimeout: 2 * time.Second, IOTimeout: 2 * time.Second})
	defer own.Close()
	b, _ := NewBreaker(name, BreakerOptions{Client: own, Classify: func(error) Outcome { return Ignore }})
	if !b.Cached() {
		t.Fatal("not cached")
	}
	n := 0
	r := Retry{Breaker: b, Attempts: 3, Sleep: func(context.Context, time.Duration) error { return nil }}
	if err := r.Do(context.Background(), func(context.Context) error {
		n++
		if n < 3 {
			return errors.New("flaky")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	s := snapshotOf(t, c, name)
	if s.Totals.Retries != 2 || s.Totals.RejectedRetry != 0 {
		t.Fatalf("totals %+v", *s.Totals)
	}
}

func TestRefusalsSayWhyFromCbdAndTheCache(t *testing.T) {
	c := testClient(t)
	name := circuitName(t)
	ctx := context.Background()
	own := NewClient(Options{Socket: c.Socket, ConnectTimeout: 2 * time.Second, IOTimeout: 2 * time.Second})
	defer own.Close()
	b, _ := NewBreaker(name, BreakerOptions{Client: own})
	ok := func(context.Context) error { return nil }
	if err := b.Execute(ctx, ok); err != nil { // the first call asks cbd, creating the circuit
		t.Fatal(err)
	}
	// Call until the cache refused one (its event comes a little later
	// than cbd's state): the refusals' reasons.
	reasonsUntilCached := func() map[string]bool {
		reasons := map[string]bool{}
		before := b.CacheRefusals()
		until(t, "the cache refuses", func() bool {
			var open *CircuitOpenError
			if err := b.Execute(ctx, ok); errors.As(err, &open) {
				reasons[open.Reason] = true
			} else if err != nil {
				t.Fatal(err)
			}
			return b.CacheRefusals() > before
		})
		return reasons
	}
	if _, err := c.SetState(ctx, name, StateOpen, SetStateOptions{Hold: true}); err != nil {
		t.Fatal(err)
	}
	if r := reasonsUntilCached(); len(r) != 1 || !r["held"] {
		t.Fatalf("held open: reasons %v", r)
	}
	if _, err := c.Release(ctx, name, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetState(ctx, name, StateClosed, SetStateOptions{}); err != nil {
		t.Fatal(err)
	}
	cached := b.CachedCalls()
	until(t, "the cache sees it closed", func() bool {
		_ = b.Execute(ctx, ok)
		return b.CachedCalls() > cached
	})
	if _, err := c.SetState(ctx, name, StateOpen, SetStateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := reasonsUntilCached(); len(r) != 1 || !r["open"] {
		t.Fatalf("open: reasons %v", r)
	}
}
