// SPDX-License-Identifier: Apache-2.0

// fold_test.go — counted successes in the cached mode (PROTOCOL.md §14
// item 12): a tight loop of successes reaches cbd exact in far fewer
// lines, folds keep their place before failures (no trip from successes
// and failures interleaved, a trip from failures in a row), and a cbd
// whose hello reply lacks outcome_counts (a stand-in proxy in front of a
// real cbd that strips it) never gets a line with a count.
// Every wait is a bounded poll: nothing here asserts how long anything took.

package cbdclient

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestCachedSuccessesFolded(t *testing.T) {
	d := sharedCbd(t)
	name := circuitName(t)
	b := cachedBreaker(t, d.Socket, name, BreakerOptions{Policy: Ctx{"failure_threshold": 1000}})
	plain := testClient(t)
	ctx := context.Background()
	// The hello's reply (after the watch's) lets the cache fold.
	u := b.cacheUse.Load()
	waitFor(t, "the hello's reply", func() bool {
		u.cache.outMu.Lock()
		defer u.cache.outMu.Unlock()
		return u.cache.countsOK
	})
	before := b.Client().CacheCounters()
	st0, err := plain.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	for i := 0; i < n; i++ {
		if err := b.Execute(ctx, succeeding); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	waitFor(t, "cbd to count every success", func() bool {
		return totals(t, plain, name).Successes == 1+n
	})
	cc := b.Client().CacheCounters()
	lines := cc.NoReplyLines - before.NoReplyLines
	if cc.Folded-before.Folded == 0 || lines > n/10 {
		t.Fatalf("%d successes: %d noreply lines, %d folded", n, lines, cc.Folded-before.Folded)
	}
	st, err := plain.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// (Other tests may share the cbd: far fewer requests, not exactly.)
	if got := st.Ops["record_success"].Requests - st0.Ops["record_success"].Requests; got > n/2 {
		t.Fatalf("cbd read %d record_success lines for %d successes", got, n)
	}
	t.Logf("%d successes: %d noreply lines, %d folded, cbd read %d record_success lines",
		n, lines, cc.Folded-before.Folded, st.Ops["record_success"].Requests-st0.Ops["record_success"].Requests)
	if b.CachedCalls() != n {
		t.Fatalf("%d cached calls of %d", b.CachedCalls(), n)
	}
}

// Folds keep their place: successes before the failures that follow them.
func TestCachedFoldsKeepOrder(t *testing.T) {
	d := sharedCbd(t)
	name := circuitName(t)
	b := cachedBreaker(t, d.Socket, name, BreakerOptions{Policy: Ctx{"failure_threshold": 3, "break_ms": 60000}})
	plain := testClient(t)
	u := b.cacheUse.Load()
	waitFor(t, "the hello's reply", func() bool {
		u.cache.outMu.Lock()
		defer u.cache.outMu.Unlock()
		return u.cache.countsOK
	})
	before := b.Client().CacheCounters().Folded
	for round := 0; round < 20; round++ {
		k := 0
		if ran := runTight(b, 102, func(int) bool { k++; return k > 100 }); ran != 102 {
			t.Fatalf("round %d: %d of 102 calls ran", round, ran)
		}
	}
	waitFor(t, "cbd to count the rounds", func() bool {
		tt := totals(t, plain, name)
		return tt.Successes == 1+20*100 && tt.Failures == 20*2
	})
	if s := snapshotOf(t, plain, name); s.State != StateClosed {
		t.Fatalf("(100 successes, 2 failures) x 20 with failure_threshold 3: %s", s.State)
	}
	if b.Client().CacheCounters().Folded == before {
		t.Fatal("no success was folded")
	}
	never, always := func(int) bool { return false }, func(int) bool { return true }
	runTight(b, 100, never)
	if ran := runTight(b, 10, always); ran != 3 {
		t.Fatalf("3 failures in a row: %d calls ran", ran)
	}
	if s := snapshotOf(t, plain, name); s.State != StateOpen {
		t.Fatalf("after 3 failures in a row: %s", s.State)
	}
}

// helloStandIn is a stand-in cbd: a proxy in front of a real one that
// strips outcome_counts from every reply (an older cbd's hello) and keeps
// every line the clients sent.
type helloStandIn struct {
	path  string
	mu    sync.Mutex
	lines []string
}

func newHelloStandIn(t *testing.T, socket string) *helloStandIn {
	s := &helloStandIn{path: filepath.Join(t.TempDir(), "old.sock")}
	ln, err := net.Listen("unix", s.path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("unix", socket)
			if err != nil {
				conn.Close()
				continue
			}
			go func() { // client to cbd, kept
				defer up.Close()
				rd := bufio.NewReaderSize(conn, 1<<20)
				for {
					line, err := rd.ReadBytes('\n')
					if len(line) > 0 {
						s.mu.Lock()
						s.lines = append(s.lines, string(line))
						s.mu.Unlock()
						if _, err := up.Write(line); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() { // cbd to client, without outcome_counts
				defer conn.Close()
				rd := bufio.NewReaderSize(up, 1<<20)
				for {
					line, err := rd.ReadBytes('\n')
					if len(line) > 0 {
						var m map[string]any
						if json.Unmarshal(line, &m) == nil && m["outcome_counts"] != nil {
							delete(m, "outcome_counts")
							text, _ := json.Marshal(m)
							line = append(text, '\n')
						}
						if _, err := conn.Write(line); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return s
}

func TestCachedNoFoldsWithoutOutcomeCounts(t *testing.T) {
	d := sharedCbd(t)
	old := newHelloStandIn(t, d.Socket)
	name := circuitName(t)
	b := cachedBreaker(t, old.path, name, BreakerOptions{Policy: Ctx{"failure_threshold": 1000}})
	plain := testClient(t)
	ctx := context.Background()
	// The hello's reply came (the connection is live past the watch's).
	waitFor(t, "a hello on the connection", func() bool {
		old.mu.Lock()
		defer old.mu.Unlock()
		for _, l := range old.lines {
			if strings.Contains(l, `"op":"hello"`) {
				return true
			}
		}
		return false
	})
	const n = 2000
	for i := 0; i < n; i++ {
		call := succeeding
		if i%500 == 499 {
			call = failing
		}
		_ = b.Execute(ctx, call)
	}
	waitFor(t, "cbd to count every outcome", func() bool {
		tt := totals(t, plain, name)
		return tt.Successes == 1+n-n/500 && tt.Failures == n/500
	})
	if f := b.Client().CacheCounters().Folded; f != 0 {
		t.Fatalf("%d successes folded for a cbd without outcome_counts", f)
	}
	old.mu.Lock()
	defer old.mu.Unlock()
	for _, l := range old.lines {
		if strings.Contains(l, `"count"`) {
			t.Fatalf("a line with a count sent to a cbd without outcome_counts: %s", l)
		}
	}
}

// More breakers than folds, interleaved: the table fills and is put whole,
// and every success still reaches cbd exactly once.
func TestCachedMoreBreakersThanFolds(t *testing.T) {
	d := sharedCbd(t)
	plain := testClient(t)
	ctx := context.Background()
	bs := make([]*Breaker, cacheFoldsMax+6)
	for i := range bs {
		bs[i] = cachedBreaker(t, d.Socket, circuitName(t), BreakerOptions{Policy: Ctx{"failure_threshold": 1000}})
	}
	u := bs[0].cacheUse.Load()
	waitFor(t, "the hello's reply", func() bool {
		u.cache.outMu.Lock()
		defer u.cache.outMu.Unlock()
		return u.cache.countsOK
	})
	const rounds = 50
	for r := 0; r < rounds; r++ {
		for _, b := range bs {
			// Runs of 3 per breaker, so that folds count more than one.
			for k := 0; k < 3; k++ {
				if err := b.Execute(ctx, succeeding); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, b := range bs {
		b := b
		waitFor(t, "cbd to count "+b.Name+"'s successes", func() bool {
			return totals(t, plain, b.Name).Successes == 1+3*rounds
		})
	}
	if bs[0].Client().CacheCounters().Folded == 0 {
		t.Fatal("no success was folded")
	}
}
