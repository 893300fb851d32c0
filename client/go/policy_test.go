// SPDX-License-Identifier: Apache-2.0

// policy_test.go — protocol 3 §1 (compact snapshots) in the Go client:
// snapshots with and without policy read alike, a compact snapshot of
// another policy_rev makes the cache's rule unknown, the policy event
// refreshes it without a state change, the watch and the synced outcomes
// ask "policy": true, the Policy options of the ops, and a cached
// breaker's rule refreshed after a real cbd's config is reloaded (SIGHUP).
// Passes against a v2 cbd too (policy in every snapshot, no policy_rev).
// Every wait is a bounded poll: nothing here asserts how long anything took.

package cbdclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cbd.example/cbdclient/internal/cbdtest"
)

const (
	policy3 = `{"failure_threshold":3,"break_ms":60000,"trip":"consecutive","source":{"failure_threshold":"config"}}`
	policy5 = `{"failure_threshold":5,"break_ms":60000,"trip":"consecutive","source":{"failure_threshold":"config"}}`
)

// snapJSON is a snapshot of circuit x: rev 0 leaves policy_rev out,
// policy "" leaves the policy out; extra members follow.
func snapJSON(rev int, policy, extra string) string {
	s := `{"name":"x","state":"closed","failure_count":0,"opened_at":null,"retry_after_ms":0,"hold":null`
	if rev != 0 {
		s += fmt.Sprintf(`,"policy_rev":%d`, rev)
	}
	if policy != "" {
		s += `,"policy":` + policy
	}
	return s + extra + "}"
}

func readSnap(t *testing.T, text string) *cacheSnapshot {
	t.Helper()
	var s cacheSnapshot
	if err := json.Unmarshal([]byte(text), &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// couldTripAt is the first of n own failures that could trip by the rule
// (1-based), 0 when none could (they are counted).
func couldTripAt(n *ownCount) int {
	for k := 1; k <= 10; k++ {
		if n.count(Failure, 0) {
			return k
		}
	}
	return 0
}

func newEntry() *cacheEntry { return &cacheEntry{name: "x", breakMs: -1, own: &ownCount{}} }

func TestSnapshotsWithAndWithoutPolicyReadAlike(t *testing.T) {
	// v2: the policy in every snapshot, no rev.
	e := newEntry()
	s := readSnap(t, snapJSON(0, policy3, `,"current_break_ms":60000`))
	e.apply(s, 0, true)
	if s.PolicyRev != 0 || !e.own.known || e.own.threshold != 3 {
		t.Fatalf("v2: rev %d, known %v, threshold %d", s.PolicyRev, e.own.known, e.own.threshold)
	}
	// v3: compact, the policy kept with its rev filled in while the rev stays.
	e = newEntry()
	e.apply(readSnap(t, snapJSON(7, policy3, "")), 0, true)
	s = readSnap(t, snapJSON(7, "", `,"failure_count":1`))
	e.apply(s, 0, true)
	if s.PolicyRev != 7 || s.Policy == nil || !e.own.known || e.own.baseFC != 1 {
		t.Fatalf("v3 same rev: rev %d, policy %v, known %v", s.PolicyRev, s.Policy, e.own.known)
	}
	// The break without current_break_ms: the kept policy's; unknown once stale.
	if e.breakMs != 60000 {
		t.Fatalf("break %d", e.breakMs)
	}
	s = readSnap(t, snapJSON(8, "", ""))
	e.apply(s, 0, false)
	if e.breakMs != -1 || e.policy != nil || s.Policy != nil {
		t.Fatalf("stale: break %d, policy %v", e.breakMs, e.policy)
	}
	// The uncached breaker's copy: the break apart only when not the policy's.
	p := map[string]any{"break_ms": float64(60000)}
	if m := MachineFromSnapshot(&Snapshot{State: StateOpen, CurrentBreakMs: 60000, Policy: p}); m.CurrentBreakMs != 0 {
		t.Fatalf("with policy: %d", m.CurrentBreakMs)
	}
	if m := MachineFromSnapshot(&Snapshot{State: StateOpen, CurrentBreakMs: 60000, PolicyRev: 7}); m.CurrentBreakMs != 60000 {
		t.Fatalf("compact: %d", m.CurrentBreakMs)
	}
}

func TestCompactSnapshotOfAnotherRevMakesTheRuleUnknown(t *testing.T) {
	e := newEntry()
	e.apply(readSnap(t, snapJSON(7, policy3, "")), 0, true)
	if k := couldTripAt(e.own); k != 3 {
		t.Fatalf("rule read: %d", k)
	}
	e.apply(readSnap(t, snapJSON(7, "", "")), 0, true)
	if k := couldTripAt(e.own); k != 3 {
		t.Fatalf("same rev: %d", k)
	}
	e.apply(readSnap(t, snapJSON(8, "", "")), 0, true)
	if k := couldTripAt(e.own); e.own.known || k != 1 {
		t.Fatalf("another rev: known %v, %d", e.own.known, k)
	}
	// A watch reply (not a reset) with a policy of another rev: unknown
	// too, its policy not taken for the rule (it may be the defaults').
	e = newEntry()
	e.apply(readSnap(t, snapJSON(7, policy3, "")), 0, true)
	e.apply(readSnap(t, snapJSON(9, policy5, "")), 0, false)
	if e.own.known {
		t.Fatal("a watch reply of another rev left the rule known")
	}
	e.apply(readSnap(t, snapJSON(9, policy5, "")), 0, true) // a synced outcome's reply
	if k := couldTripAt(e.own); k != 5 {
		t.Fatalf("synced reply: %d", k)
	}
}

func TestPolicyEventRefreshesRuleAndEntry(t *testing.T) {
	c := &watchCache{entries: map[string]*cacheEntry{"x": newEntry()}}
	if !c.queueWatchLocked([]string{"x"}) || !strings.Contains(string(c.out), `"policy":true`) {
		t.Fatalf("watch line: %s", c.out)
	}
	e := c.entries["x"]
	c.applyLine([]byte(`{"ok":true,"snapshots":[` + snapJSON(7, policy3, "") + `]}`))
	c.applyLine([]byte(`{"event":"change","from":"closed","snapshot":` + snapJSON(7, "", `,"failure_count":1`) + `}`))
	if e.seq != 1 || !e.own.known || e.own.threshold != 3 || e.last.Policy == nil {
		t.Fatalf("change: seq %d, known %v, threshold %d", e.seq, e.own.known, e.own.threshold)
	}
	c.applyLine([]byte(`{"event":"surprise","snapshot":{"name":"x"}}`))
	c.applyLine([]byte(`{"event":"policy","snapshot":` + snapJSON(8, policy5, `,"failure_count":1`) + `}`))
	cc := c.counters()
	// change and policy (an unknown event is not counted)
	if cc.PolicyEvents != 1 || cc.Events != 2 || cc.BadLines != 0 {
		t.Fatalf("counters: %+v", cc)
	}
	if e.seq != 2 || e.state != StateClosed || e.last.PolicyRev != 8 || e.own.rev != 8 {
		t.Fatalf("policy event: seq %d, state %s, rev %d", e.seq, e.state, e.last.PolicyRev)
	}
	if v, _ := toInt(e.last.Policy["failure_threshold"]); v != 5 {
		t.Fatalf("the event's snapshot policy: %v", e.last.Policy)
	}
	if k := couldTripAt(e.own); k != 4 {
		t.Fatalf("rule after the policy event: %d (one failure counted already)", k)
	}
}

func protocolOf(t *testing.T, c *Client) int {
	h, err := c.Hello(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	return h.Protocol
}

func TestOpsTakePolicy(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	name := circuitName(t)
	v3 := protocolOf(t, c) >= 3
	rec, err := c.RecordFailure(ctx, name, RecordOptions{DurationMs: -1})
	if err != nil || (rec.Policy == nil) != v3 {
		t.Fatalf("record: %v, policy %v (v3 %v)", err, rec.Policy, v3)
	}
	if rec, err = c.RecordFailure(ctx, name, RecordOptions{DurationMs: -1, Policy: true}); err != nil || rec.Policy == nil {
		t.Fatalf("record with policy: %v", err)
	}
	g, err := c.Get(ctx, name, nil)
	if err != nil || g.Snapshot.Policy == nil {
		t.Fatalf("get: %v", err)
	}
	if v3 && (g.Snapshot.PolicyRev == 0 || g.Snapshot.PolicyRev != rec.PolicyRev) {
		t.Fatalf("policy_rev: get %d, record %d", g.Snapshot.PolicyRev, rec.PolicyRev)
	}
	all, err := c.ListAll(ctx, "", nil, ListPolicy())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range all {
		if s.Policy == nil {
			t.Fatalf("%s listed without policy", s.Name)
		}
		found = found || s.Name == name
	}
	if !found {
		t.Fatal("not listed")
	}
}

func TestUncachedBreakerAsksForThePolicyUntilItHasIt(t *testing.T) {
	c := testClient(t)
	b, err := NewBreaker(circuitName(t), BreakerOptions{Client: c, Cache: CacheOff,
		Policy: Ctx{"failure_threshold": 4}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Execute(context.Background(), succeeding); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	seen := b.seenPolicy
	b.mu.Unlock()
	if v, _ := toInt(seen["failure_threshold"]); v != 4 {
		t.Fatalf("the policy cbd reported: %v", seen)
	}
}

func reloadConf(name string, n int) string {
	return fmt.Sprintf("[circuit \"%s\"]\nfailure_threshold = %d\nbreak_ms = 600000\n", name, n)
}

// A cached breaker learns its circuit's rule (threshold 3); the operator
// reloads a config that makes it 5: once the reload's event arrived the
// breaker syncs exactly at the 5th failure in a row, not at the 3rd (the
// old rule) nor at the 1st (a rule unknown).
func TestCachedRuleRefreshesAfterAReload(t *testing.T) {
	const name = "reloaded"
	d := cbdtest.StartT(t, reloadConf(name, 3))
	b := cachedBreaker(t, d.Socket, name, BreakerOptions{})
	ctx := context.Background()
	failing := func(context.Context) error { return errBoom }
	// The rule unknown yet: synced, its reply reads it.
	if err := b.Execute(ctx, failing); !errors.Is(err, errBoom) {
		t.Fatal(err)
	}
	if err := b.Execute(ctx, succeeding); err != nil {
		t.Fatal(err)
	}
	if e, _ := cachedEntry(b); !e.own.known || e.own.threshold != 3 {
		t.Fatalf("rule before the reload: known %v, threshold %d", e.own.known, e.own.threshold)
	}
	events := b.Client().CacheCounters().Events
	if err := os.WriteFile(filepath.Join(d.Dir, "cbd.conf"), []byte(reloadConf(name, 5)), 0o600); err != nil {
		t.Fatal(err)
	}
	d.Reload()
	waitFor(t, "the reload", func() bool {
		g, err := b.Client().Get(ctx, name, nil)
		v, _ := toInt(g.Snapshot.Policy["failure_threshold"])
		return err == nil && v == 5
	})
	waitFor(t, "the reload's event", func() bool { return b.Client().CacheCounters().Events > events })
	waitFor(t, "the new rule", func() bool {
		e, _ := cachedEntry(b)
		e.own.mu.Lock()
		defer e.own.mu.Unlock()
		return e.own.known && e.own.threshold == 5
	})
	// Protocol 3 says it with a policy event (v2: a change event).
	if v3 := protocolOf(t, b.Client()) >= 3; (b.Client().CacheCounters().PolicyEvents == 1) != v3 {
		t.Fatalf("policy events %d (protocol 3: %v)", b.Client().CacheCounters().PolicyEvents, v3)
	}
	if err := b.Execute(ctx, succeeding); err != nil {
		t.Fatal(err)
	}
	syncs := b.Client().CacheCounters().Syncs
	for k := 1; k <= 4; k++ {
		if err := b.Execute(ctx, failing); !errors.Is(err, errBoom) {
			t.Fatalf("failure %d: %v", k, err)
		}
		if n := b.Client().CacheCounters().Syncs; n != syncs {
			t.Fatalf("failure %d synced", k)
		}
	}
	if err := b.Execute(ctx, failing); !errors.Is(err, errBoom) {
		t.Fatal(err)
	}
	if n := b.Client().CacheCounters().Syncs; n != syncs+1 {
		t.Fatalf("the 5th failure: %d syncs, want %d", n, syncs+1)
	}
	if err := b.Execute(ctx, succeeding); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("after the 5th failure: %v", err)
	}
	if f := totals(t, b.Client(), name).Failures; f != 6 {
		t.Fatalf("failures %d", f)
	}
}
