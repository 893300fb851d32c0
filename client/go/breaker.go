// SPDX-License-Identifier: Apache-2.0

// breaker.go — the breaker API, as libcbclient's (client/circuit-breaker.c
// over client/store-resilient.c): Execute with a fallback, three-way
// classification, the call's duration reported as duration_ms, half-open
// permits and bulkhead tickets always handed back (a panic or a cancelled
// context too),
// state-change callbacks; and the store policies for when cbd is
// unreachable:
//
//	StoreLocal   carry on with a private copy of the circuit (local.go),
//	             seeded from the last state cbd reported and run with the
//	             policy cbd reported for it (a hold too);
//	StoreAllow   calls run as if the circuit were closed;
//	StoreReject  Acquire returns cbd's *Error without running the call;
//	             bookkeeping after a call never fails.
//
// No latching: every call asks cbd first, and its first answer makes it
// authoritative again (the local copy is dropped). After a timeout cbd is
// skipped for TimeoutBackoff, so a hung cbd costs one timeout per window.
//
// Cached mode (cache.go, on by default): closed and open calls are
// decided from the process's watch cache, without a round trip; half_open,
// an elapsed break, a name not read yet and a lost watch connection take
// the path above; so do retries and every call on a circuit with a
// bulkhead or a retry budget (protocol 3).
//
// Bulkhead (protocol 3 §2): on a circuit with max_concurrent every granted
// call holds a ticket (its permit), handed back with its outcome whatever
// the call does (returns, panics, its context is cancelled). Such allows
// go over connections of the breaker's own, never dropped for a caller's
// cancelled context (a dropped connection would free every ticket taken
// on it): a caller cancelled while cbd has not answered gets ctx.Err() at
// once, and a ticket granted later is handed back at once.

package cbdclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// StorePolicy says what a breaker does while cbd is unreachable.
type StorePolicy int

// The store policies (libcbclient's CBC_STORE_LOCAL, _ALLOW, _REJECT).
const (
	StoreLocal StorePolicy = iota
	StoreAllow
	StoreReject
)

func (p StorePolicy) String() string {
	return [...]string{"local", "allow", "reject"}[p]
}

// DefaultTimeoutBackoff: after a timeout cbd is skipped for this long
// (libcbclient's CBC_DEFAULT_TIMEOUT_BACKOFF_MS).
const DefaultTimeoutBackoff = 250 * time.Millisecond

// MaxWait is the longest wait for a bulkhead ticket cbd takes (allow's
// wait_ms).
const MaxWait = 60 * time.Second

// limitKeys are protocol 3's policy members (§7b) a breaker may declare
// besides the state machine's.
var limitKeys = map[string]bool{"max_concurrent": true, "retry_budget_percent": true,
	"retry_min_per_s": true}

// MaxNameBytes is the longest circuit name (§5).
const MaxNameBytes = 256

// BreakerOptions configure a Breaker; zero values take the defaults.
type BreakerOptions struct {
	// Client is the connection to cbd (default: NewClient on Socket).
	Client *Client
	Socket string
	// StorePolicy applies while cbd is unreachable (default StoreLocal).
	StorePolicy StorePolicy
	// Classify maps a call's error to its outcome (default DefaultClassify).
	Classify Classifier
	// Fallback runs instead of returning a refusal (errors.Is(err,
	// ErrRefused): *CircuitOpenError, *BulkheadFullError, *RetryBudgetError).
	Fallback func(ctx context.Context, err error) error
	// OnStateChange is called after the breaker saw the circuit move.
	OnStateChange func(name, from, to string)
	// OnStoreError is called when cbd could not serve op.
	OnStoreError func(err error, op string)
	// TimeoutBackoff: cbd is skipped this long after a timeout (0: the
	// default; negative: never skipped).
	TimeoutBackoff time.Duration
	// Clock gives ms since the epoch (virtual time: sent as ctx.now).
	Clock func() int64
	// Policy is the policy the breaker declares (§6 keys; sent as ctx).
	Policy Ctx
	// Cache: CacheAuto (default: cached unless Clock is set), CacheOn or
	// CacheOff (every call asks cbd: allow, then record).
	Cache CacheMode
	// Wait is how long a call waits in cbd for a bulkhead ticket when
	// the circuit's max_concurrent calls are all in flight (0..MaxWait, in
	// whole ms), before a *BulkheadFullError. Such allows go over
	// connections of their own with the client's IOTimeout plus Wait.
	Wait time.Duration
}

// Permit is a granted call: report its outcome exactly once.
type Permit struct {
	Name     string
	State    string
	Token    string // allow's permit (a trial slot or a bulkhead ticket)
	Local    bool   // granted by the local fallback
	Started  time.Time
	reported bool
	cache    *watchCache // granted by the watch cache: the outcome goes as noreply
}

// Breaker is a circuit breaker on the cbd circuit Name (shared by every
// process that uses the name); safe for goroutines.
type Breaker struct {
	Name   string
	opts   BreakerOptions
	client *Client
	policy Policy

	mu         sync.Mutex
	observed   string
	local      *LocalStore
	degraded   bool
	degradedA  atomic.Bool // degraded, read without mu
	skipUntil  time.Time
	skipErr    error
	seen       Machine
	seenPolicy map[string]any // cbd's policy for the circuit (nil: unknown, or stale)
	seenRev    uint64         // its policy_rev (protocol 3 §1)
	seenHold   *Hold
	skipped    int64 // requests not sent: cbd skipped after a timeout
	localCalls int64 // permits granted by the local fallback

	cached        bool // decides from the watch cache (BreakerOptions.Cache)
	ownClient     bool // made by NewBreaker: Close closes it
	cacheUse      atomic.Pointer[cacheUse]
	cacheSeen     uint64 // change events of the entry already seen
	cacheRead     uint64 // snapshots of the entry already noted
	told          atomic.Pointer[told]
	outcomeLines  [3][]byte    // noreply line heads by Outcome, up to duration_ms's value
	syncLines     [3][]byte    // the same with a reply (an outcome that could trip)
	rejectedLine  []byte       // the record of refusals made from the cache, up to count's value
	foldPrefix    []byte       // the noreply success line's head, without duration_ms (a fold's key)
	foldSlowMs    int64        // the ctx's slow_call_ms (-1: none): slower successes are not folded
	foldHint      atomic.Int32 // its fold's slot the last time (a hint: any value is safe)
	rejectedMu    sync.Mutex
	rejectedN     int64     // refusals made from the cache not yet reported (atomic)
	rejectedSince time.Time // when the first of them was made
	cachedCalls   int64     // closed calls the cache let run
	cacheRefusals int64     // calls the cache refused
	uncachedCalls int64     // calls of a cached breaker that asked cbd

	// The circuit has a bulkhead or a retry budget (declared, reported, or
	// a closed allow answered with a ticket): allows go over ticketConns.
	limitedSeen atomic.Bool
	ticketMu    sync.Mutex
	ticketConns []*Client // idle; kept open (closing frees their tickets)
}

// cacheUse is the entry a breaker decides from, in the cache it belongs
// to (entry nil: past MaxCachedNames).
type cacheUse struct {
	cache *watchCache
	entry *cacheEntry
}

// CachedCalls counts the closed calls run from the watch cache.
func (b *Breaker) CachedCalls() int64 { return atomic.LoadInt64(&b.cachedCalls) }

// CacheRefusals counts the calls the watch cache refused (open, held open).
func (b *Breaker) CacheRefusals() int64 { return atomic.LoadInt64(&b.cacheRefusals) }

// UncachedCalls counts the calls of a cached breaker that asked cbd
// (the first one, half_open, an elapsed break, no live watch).
func (b *Breaker) UncachedCalls() int64 { return atomic.LoadInt64(&b.uncachedCalls) }

// Cached says whether the breaker decides from the watch cache.
func (b *Breaker) Cached() bool { return b.cached }

// Skipped counts the requests the timeout backoff kept from cbd.
func (b *Breaker) Skipped() int64 { return atomic.LoadInt64(&b.skipped) }

// LocalCalls counts the permits the LOCAL fallback granted.
func (b *Breaker) LocalCalls() int64 { return atomic.LoadInt64(&b.localCalls) }

// NewBreaker is a breaker on the circuit name.
func NewBreaker(name string, opts BreakerOptions) (*Breaker, error) {
	if len(name) < 1 || len(name) > MaxNameBytes {
		return nil, fmt.Errorf("name must be 1 to %d bytes", MaxNameBytes)
	}
	if opts.StorePolicy < StoreLocal || opts.StorePolicy > StoreReject {
		return nil, fmt.Errorf("StorePolicy must be StoreLocal, StoreAllow or StoreReject")
	}
	for k := range opts.Policy {
		if !IsPolicyKey(k) && !limitKeys[k] {
			return nil, fmt.Errorf("Policy: unknown key %q", k)
		}
	}
	p, err := PolicyFromCtx(opts.Policy)
	if err != nil {
		return nil, err
	}
	if opts.Cache < CacheAuto || opts.Cache > CacheOff {
		return nil, fmt.Errorf("Cache must be CacheAuto, CacheOn or CacheOff")
	}
	if opts.Cache == CacheOn && opts.Clock != nil {
		return nil, fmt.Errorf("Cache: CacheOn needs real time (no Clock)")
	}
	if opts.Wait < 0 || opts.Wait > MaxWait {
		return nil, fmt.Errorf("Wait must be from 0 to %v", MaxWait)
	}
	if opts.TimeoutBackoff == 0 {
		opts.TimeoutBackoff = DefaultTimeoutBackoff
	}
	if opts.Classify == nil {
		opts.Classify = DefaultClassify
	}
	c := opts.Client
	if c == nil {
		c = NewClient(Options{Socket: opts.Socket})
	}
	b := &Breaker{Name: name, opts: opts, client: c, policy: p, observed: StateClosed,
		local: NewLocalStore(), seen: NewMachine(), ownClient: opts.Client == nil,
		cached: opts.Cache == CacheOn || (opts.Cache == CacheAuto && opts.Clock == nil)}
	if opts.Policy["max_concurrent"] != nil || opts.Policy["retry_budget_percent"] != nil {
		b.limitedSeen.Store(true)
	}
	if b.cached {
		if err := b.makeOutcomeLines(); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// makeOutcomeLines writes once what every noreply outcome line of the
// breaker starts with (only duration_ms changes from call to call).
func (b *Breaker) makeOutcomeLines() error {
	name, err := json.Marshal(b.Name)
	if err != nil {
		return err
	}
	ctx := []byte{}
	if len(b.opts.Policy) > 0 {
		text, err := json.Marshal(map[string]any(b.opts.Policy))
		if err != nil {
			return fmt.Errorf("Policy: %v", err)
		}
		ctx = append([]byte(`,"ctx":`), text...)
	}
	for o, head := range map[Outcome]string{Success: `{"op":"record_success"`,
		Failure: `{"op":"record_failure"`, Ignore: `{"op":"record","outcome":"ignore"`} {
		line := append([]byte(head+`,"name":`), name...)
		line = append(line, ctx...)
		// With a reply (an outcome that could trip), which carries the
		// circuit's policy (protocol 3 §1) to refresh the cache's rule.
		b.syncLines[o] = append(append([]byte{}, line...), `,"policy":true,"duration_ms":`...)
		b.outcomeLines[o] = append(append([]byte{}, line...), `,"noreply":true,"duration_ms":`...)
		if o == Success {
			// Counted successes: this head, then ,"count":N} (PROTOCOL.md
			// §14 item 12). Its own array: the cache keeps it as a key.
			b.foldPrefix = append(append([]byte{}, line...), `,"noreply":true`...)
		}
	}
	b.foldSlowMs = -1
	if v, ok := toInt(b.opts.Policy["slow_call_ms"]); ok {
		b.foldSlowMs = v
	}
	b.rejectedLine = append(append([]byte(`{"op":"record","outcome":"rejected","name":`), name...), ctx...)
	b.rejectedLine = append(b.rejectedLine, `,"noreply":true,"count":`...)
	return nil
}

// rejectedFlushAfter: refusals made from the cache are reported to cbd in
// batches (protocol 3 §6); the first waits at most this long for others
// while refusals go on, and the batch also goes when the cache stops
// refusing and on Close.
const rejectedFlushAfter = time.Second

// rejectedCountMax is the most refusals one record reports (cbd's bound).
const rejectedCountMax = 1000000

// rejectedAdd counts one refusal made from c, and sends the batch once its
// first refusal is rejectedFlushAfter old.
func (b *Breaker) rejectedAdd(c *watchCache) {
	now := time.Now()
	b.rejectedMu.Lock()
	if atomic.AddInt64(&b.rejectedN, 1) == 1 {
		b.rejectedSince = now
		b.rejectedMu.Unlock()
		return
	}
	due := now.Sub(b.rejectedSince) >= rejectedFlushAfter
	b.rejectedMu.Unlock()
	if due {
		b.rejectedFlush(c, false)
	}
}

// rejectedFlush reports the refusals made from the cache so far (record,
// outcome rejected, with their count); kept for later when c cannot take
// the line. urgent: written at once, with what is queued before it.
func (b *Breaker) rejectedFlush(c *watchCache, urgent bool) {
	b.rejectedMu.Lock()
	n := atomic.SwapInt64(&b.rejectedN, 0)
	b.rejectedMu.Unlock()
	for n > 0 && c != nil {
		part := n
		if part > rejectedCountMax {
			part = rejectedCountMax
		}
		if !c.send(b.rejectedLine, part, urgent) {
			break
		}
		n -= part
	}
	if n > 0 {
		b.rejectedMu.Lock()
		if atomic.AddInt64(&b.rejectedN, n) == n {
			b.rejectedSince = time.Now()
		}
		b.rejectedMu.Unlock()
	}
}

// Close gives back what the breaker holds: the refusals its cache made
// not yet reported to cbd (written now, with the outcomes queued before
// them), the client NewBreaker made for it (Options.Client nil), with its
// share of the watch connection (queued outcomes written first: what the
// socket does not take at once goes on as cbd reads it, waited for 200 ms
// at most). A breaker on a Client of yours leaves that to the client's
// Close.
func (b *Breaker) Close() error {
	if u := b.cacheUse.Load(); u != nil {
		// Written now, not left to the cache's owner.
		b.rejectedFlush(u.cache, true)
	}
	b.ticketMu.Lock()
	conns := b.ticketConns
	b.ticketConns = nil
	b.ticketMu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
	if b.ownClient {
		return b.client.Close()
	}
	return nil
}

// Client is the breaker's connection to cbd.
func (b *Breaker) Client() *Client { return b.client }

func (b *Breaker) now() int64 {
	if b.opts.Clock != nil {
		return b.opts.Clock()
	}
	return time.Now().UnixMilli()
}

func (b *Breaker) callCtx() (Ctx, int64) {
	now := b.now()
	if b.opts.Clock == nil {
		return b.opts.Policy, now
	}
	c := Ctx{"now": now}
	for k, v := range b.opts.Policy {
		c[k] = v
	}
	return c, now
}

// State is the last state seen, without I/O.
func (b *Breaker) State() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.observed
}

func (b *Breaker) observe(state string, degraded bool) {
	if degraded && b.opts.StorePolicy == StoreAllow {
		return // "as if closed" is not a state anyone is in
	}
	b.mu.Lock()
	prev := b.observed
	b.observed = state
	b.mu.Unlock()
	if prev != state && b.opts.OnStateChange != nil {
		b.opts.OnStateChange(b.Name, prev, state)
	}
}

// remote asks cbd; (true, nil) when it answered, (false, err) when it is
// unavailable. Refusals that are answers come back as (true, err).
func (b *Breaker) remote(op string, fn func() error) (bool, error) {
	b.mu.Lock()
	skipping := b.opts.TimeoutBackoff > 0 && time.Now().Before(b.skipUntil)
	skipErr := b.skipErr
	b.mu.Unlock()
	if skipping {
		atomic.AddInt64(&b.skipped, 1)
		b.storeError(skipErr, op)
		return false, skipErr
	}
	err := fn()
	if err != nil && Unavailable(err) {
		var e *Error
		if errors.As(err, &e) && e.Code == CodeTimeout && b.opts.TimeoutBackoff > 0 {
			b.mu.Lock()
			b.skipUntil = time.Now().Add(b.opts.TimeoutBackoff)
			b.skipErr = err
			b.mu.Unlock()
		}
		b.storeError(err, op)
		return false, err
	}
	if err == nil {
		b.mu.Lock()
		if b.degraded {
			b.degraded = false
			b.degradedA.Store(false)
			b.local.Forget(b.Name)
		}
		b.mu.Unlock()
	}
	return true, err
}

func (b *Breaker) storeError(err error, op string) {
	if b.opts.OnStoreError != nil {
		b.opts.OnStoreError(err, op)
	}
}

// noteSnapshot keeps what cbd said of the circuit. Its policy is kept with
// its policy_rev (protocol 3 §1): a compact snapshot of another rev makes
// it unknown (the declared policy runs the fallback) until the next
// uncached record asks for it.
func (b *Breaker) noteSnapshot(s *Snapshot) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case s.Policy != nil:
		b.seenPolicy, b.seenRev = s.Policy, s.PolicyRev
		if s.Policy["max_concurrent"] != nil || s.Policy["retry_budget_percent"] != nil {
			b.limitedSeen.Store(true)
		}
	case s.PolicyRev != b.seenRev:
		b.seenPolicy = nil // stale: the policy changed since
	case b.seenPolicy != nil:
		c := *s
		c.Policy = b.seenPolicy
		s = &c
	}
	b.seen = MachineFromSnapshot(s)
	b.seenHold = s.Hold
}

// noteAllow folds an allow answer's state into the last snapshot seen.
func (b *Breaker) noteAllow(r *AllowReply, now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case r.State == StateOpen && b.seen.State != StateOpen:
		p := b.fallbackPolicyLocked()
		b.seen.State = StateOpen
		b.seen.OpenedAt = at(now - (b.seen.BreakInEffect(p) - r.RetryAfterMs))
	case (r.State == StateClosed || r.State == StateHalfOpen) && b.seen.State != r.State:
		_ = b.seen.Force(r.State, now)
	}
}

// fallbackPolicyLocked is the policy the local copy runs: cbd's for the
// circuit when it reported one (a hold kept through it), else the
// declared one.
func (b *Breaker) fallbackPolicyLocked() Policy {
	if b.seenPolicy == nil {
		return b.policy
	}
	reported := Ctx{}
	for k, v := range b.seenPolicy {
		if k != "source" && k != "preset" {
			reported[k] = v
		}
	}
	p, err := PolicyFromCtx(reported)
	if err != nil {
		return b.policy
	}
	if h := b.seenHold; h != nil && h.State == StateOpen {
		brk := DurationMax
		if h.Until != nil && b.seen.OpenedAt != nil {
			brk = *h.Until - *b.seen.OpenedAt
			if brk < 1 {
				brk = 1
			}
		}
		p.BreakMs, p.BreakBackoff, p.BreakMaxMs = brk, 1, 0
	} else if h != nil {
		p.Trip, p.FailureThreshold = TripConsecutive, CountMax
	}
	return p
}

func (b *Breaker) fallbackPolicy() Policy {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fallbackPolicyLocked()
}

// BreakInEffect is the break as last seen (cbd's policy, grown by
// break_backoff), else the declared one.
func (b *Breaker) BreakInEffect() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Duration(b.seen.BreakInEffect(b.fallbackPolicyLocked())) * time.Millisecond
}

func (b *Breaker) degrade(now int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.degraded {
		b.local.Seed(b.Name, b.seen, now)
		b.degraded = true
		b.degradedA.Store(true)
	}
}

// Acquire asks for a permit for one call: a refusal when refused
// (errors.Is(err, ErrRefused): a *CircuitOpenError, a *BulkheadFullError
// after waiting up to Wait; StoreReject: cbd's *Error when cbd is
// unavailable; other refusals of cbd, such as capacity, as they are).
func (b *Breaker) Acquire(ctx context.Context) (*Permit, error) {
	return b.acquire(ctx, false)
}

// AcquireRetry is Acquire for a retry of a call that failed: allow's
// "retry": true, counted against the circuit's retry budget (a
// *RetryBudgetError past it); it always asks cbd.
func (b *Breaker) AcquireRetry(ctx context.Context) (*Permit, error) {
	return b.acquire(ctx, true)
}

// Limited says whether the breaker knows the circuit has a bulkhead or a
// retry budget (its calls then always ask cbd).
func (b *Breaker) Limited() bool { return b.limitedSeen.Load() }

func (b *Breaker) acquire(ctx context.Context, retry bool) (*Permit, error) {
	if err := ctx.Err(); err != nil {
		return nil, err // cancelled before the call: cbd is not asked
	}
	if b.cached {
		if !retry && !b.limitedSeen.Load() {
			if decided, permit, err := b.acquireCached(); decided {
				return permit, err
			}
		}
		atomic.AddInt64(&b.uncachedCalls, 1)
	}
	cctx, now := b.callCtx()
	var reply *AllowReply
	opts := AllowOptions{WaitMs: b.opts.Wait.Milliseconds(), Retry: retry}
	answered, err := b.remote("allow", func() error {
		var e error
		if b.limitedSeen.Load() || opts.WaitMs > 0 {
			reply, e = b.allowDetached(ctx, cctx, opts)
		} else {
			reply, e = b.client.AllowWith(ctx, b.Name, cctx, opts)
		}
		return e
	})
	if answered && err != nil {
		return nil, err
	}
	degraded := !answered
	if degraded {
		switch b.opts.StorePolicy {
		case StoreAllow:
			return &Permit{Name: b.Name, State: StateClosed, Started: time.Now()}, nil
		case StoreReject:
			return nil, err
		}
		b.degrade(now)
		r := b.local.Allow(b.Name, b.fallbackPolicy(), now)
		reply = &r
	} else {
		b.noteAllow(reply, now)
		b.noteTold(reply.State)
		if b.cached && b.cacheUse.Load() == nil {
			// The first answer created the circuit with our policy:
			// from now on the cache decides.
			w := b.client.watchCache()
			b.cacheUse.Store(&cacheUse{cache: w, entry: w.watch(b.Name)})
		}
	}
	b.observe(reply.State, degraded)
	if !reply.Allowed {
		if !degraded && reply.Reason == "concurrency" {
			b.limitedSeen.Store(true)
		}
		return nil, refusal(b.Name, reply)
	}
	if !degraded && reply.State == StateClosed && reply.Permit != "" {
		b.limitedSeen.Store(true) // a ticket: the circuit has a bulkhead
	}
	if degraded {
		atomic.AddInt64(&b.localCalls, 1)
	}
	return &Permit{Name: b.Name, State: reply.State, Token: reply.Permit, Local: degraded,
		Started: time.Now()}, nil
}

// allowDetached asks allow on one of the breaker's ticket connections,
// in a goroutine of its own with no caller's context: a cancelled caller
// gets ctx.Err() at once (the connection, and the tickets other calls
// took on it, are not dropped for it), and a ticket granted after that
// is handed back at once (outcome ignore).
func (b *Breaker) allowDetached(ctx context.Context, cctx Ctx, o AllowOptions) (*AllowReply, error) {
	type result struct {
		r   *AllowReply
		err error
	}
	conn := b.ticketConn()
	done := make(chan result, 1)
	go func() {
		r, err := conn.AllowWith(context.Background(), b.Name, cctx, o)
		b.ticketMu.Lock()
		b.ticketConns = append(b.ticketConns, conn)
		b.ticketMu.Unlock()
		done <- result{r, err}
	}()
	select {
	case res := <-done:
		return res.r, res.err
	case <-ctx.Done():
		go func() {
			res := <-done
			if res.err == nil && res.r.Permit != "" {
				_, _ = b.client.Record(context.Background(), b.Name, Ignore,
					RecordOptions{Permit: res.r.Permit, DurationMs: -1, Ctx: cctx, NoReply: true})
			}
		}()
		return nil, ctx.Err()
	}
}

// ticketConn is an idle ticket connection, or a new one: the client's
// socket and timeouts, Wait added to its IOTimeout.
func (b *Breaker) ticketConn() *Client {
	b.ticketMu.Lock()
	defer b.ticketMu.Unlock()
	if n := len(b.ticketConns); n > 0 {
		c := b.ticketConns[n-1]
		b.ticketConns = b.ticketConns[:n-1]
		return c
	}
	return NewClient(Options{Socket: b.client.Socket, ConnectTimeout: b.client.ConnectTimeout,
		IOTimeout: b.client.IOTimeout + b.opts.Wait, MaxReplyBytes: b.client.MaxReplyBytes})
}

// noteTold keeps the state cbd answered an uncached request of a cached
// breaker with: the cache does not decide from an older state.
func (b *Breaker) noteTold(state string) {
	if u := b.cacheUse.Load(); u != nil && u.entry != nil {
		b.told.Store(&told{seq: u.cache.seqOf(u.entry), state: state})
	}
}

// cacheAnswered: the cache decided from a fresh reading of cbd, which is
// authoritative again: a local copy made when cbd was away earlier is
// dropped, so the next fallback starts from the snapshot the cache read
// (noted by acquireCached; a hold placed meanwhile too): an open circuit
// stays open, a held one held.
func (b *Breaker) cacheAnswered() {
	b.mu.Lock()
	if b.degraded {
		b.degraded = false
		b.degradedA.Store(false)
		b.local.Forget(b.Name)
	}
	b.mu.Unlock()
}

// acquireCached decides from the watch cache; decided false: ask cbd.
func (b *Breaker) acquireCached() (decided bool, permit *Permit, err error) {
	u := b.cacheUse.Load()
	if u == nil {
		return false, nil, nil // the first call: cbd creates the circuit
	}
	if w := b.client.watchCache(); w != u.cache {
		// The client was closed and its cache given back: watch again.
		u = &cacheUse{cache: w, entry: w.watch(b.Name)}
		b.cacheUse.Store(u)
		atomic.StoreUint64(&b.cacheSeen, 0)
	}
	if u.entry == nil {
		atomic.AddInt64(&u.cache.uncached, 1)
		return false, nil, nil // past MaxCachedNames
	}
	v, retryAfterMs, fresh, latest := u.cache.decide(u.entry, &b.cacheSeen, &b.cacheRead, b.told.Load())
	if latest != nil {
		b.noteSnapshot(latest)
	}
	if fresh != nil {
		// A change made anywhere: callbacks fire as for the answers of cbd.
		b.noteSnapshot(fresh)
		b.observe(fresh.State, false)
	}
	if (v == cachePermit || v == cacheRefuse) && b.degradedA.Load() {
		b.cacheAnswered()
	}
	if v == cacheRefuse {
		b.rejectedAdd(u.cache)
	} else if atomic.LoadInt64(&b.rejectedN) != 0 {
		b.rejectedFlush(u.cache, false) // it stopped refusing
	}
	switch v {
	case cachePermit:
		atomic.AddInt64(&b.cachedCalls, 1)
		b.observe(StateClosed, false)
		return true, &Permit{Name: b.Name, State: StateClosed, Started: time.Now(), cache: u.cache}, nil
	case cacheRefuse:
		atomic.AddInt64(&b.cacheRefusals, 1)
		b.observe(StateOpen, false)
		reason := "open"
		u.cache.mu.RLock()
		if u.entry.holdState == StateOpen {
			reason = "held"
		}
		u.cache.mu.RUnlock()
		return true, nil, &CircuitOpenError{Name: b.Name, State: StateOpen,
			RetryAfter: time.Duration(retryAfterMs) * time.Millisecond, Reason: reason}
	}
	return false, nil, nil
}

// Report records a granted call's outcome with its duration (d < 0: the
// time since Acquire) and hands its permit back. Never fails for cbd's
// sake: bookkeeping does not replace the call's own result. Reporting a
// permit twice is an error.
func (b *Breaker) Report(p *Permit, o Outcome, d time.Duration) error {
	b.mu.Lock()
	if p.reported {
		b.mu.Unlock()
		return fmt.Errorf("permit for circuit %q was already reported", b.Name)
	}
	p.reported = true
	b.mu.Unlock()
	if d < 0 {
		d = time.Since(p.Started)
	}
	ms := d.Milliseconds()
	if o < Success || o > Ignore {
		o = Failure
	}
	// The process's own outcomes, whatever path they take, are counted
	// against the rule: one that could trip the circuit is sent with a
	// reply awaited, so the next call sees the state it led to.
	couldTrip, foldable := false, false
	if u := b.cacheUse.Load(); u != nil && u.entry != nil {
		couldTrip = u.entry.own.count(o, ms)
		// A success not slow by the kept policy may be counted in a fold.
		foldable = o == Success && !couldTrip && u.entry.foldable(ms)
	}
	if p.cache != nil && couldTrip {
		if snap, sent := p.cache.sendSync(b.syncLines[o], ms); sent {
			if snap != nil {
				b.noteTold(snap.State)
				b.noteSnapshot(snap)
				b.observe(snap.State, false)
			}
			return nil
		}
	} else if p.cache != nil && foldable && (b.foldSlowMs < 0 || ms < b.foldSlowMs) &&
		p.cache.fold(b.foldPrefix, &b.foldHint) {
		return nil // counted in its fold, sent with the next write
	} else if p.cache != nil && p.cache.send(b.outcomeLines[o], ms, o == Failure) {
		return nil // cbd applies it without answering
	}
	remoteToken := p.Token
	if p.Local {
		remoteToken = ""
	}
	cctx, now := b.callCtx()
	// An ignored call without a permit changes nothing but cbd's
	// totals.ignored: sent without waiting for the reply.
	noreply := o == Ignore && remoteToken == ""
	// Until cbd's policy for the circuit is known (protocol 3 sends it
	// only when asked), the reply brings it for the LOCAL fallback.
	b.mu.Lock()
	askPolicy := b.seenPolicy == nil && !noreply
	b.mu.Unlock()
	// The permit goes back even when the caller's context is cancelled.
	rctx := context.Background()
	var snap *Snapshot
	answered, err := b.remote("record", func() error {
		var e error
		snap, e = b.client.Record(rctx, b.Name, o, RecordOptions{Permit: remoteToken,
			DurationMs: ms, Ctx: cctx, NoReply: noreply, Policy: askPolicy})
		return e
	})
	if answered {
		if err == nil && snap != nil {
			b.noteTold(snap.State)
			b.noteSnapshot(snap)
			if o != Ignore {
				b.observe(snap.State, false)
			}
		}
		return nil
	}
	if b.opts.StorePolicy != StoreLocal {
		return nil // StoreAllow and StoreReject: nothing to keep
	}
	b.degrade(now)
	token := ""
	if p.Local {
		token = p.Token
	}
	s := b.local.Record(b.Name, o, b.fallbackPolicy(), now, ms, token)
	if o != Ignore {
		b.observe(s.State, true)
	}
	return nil
}

// Execute runs fn if the circuit permits and reports its outcome (by
// Classify) and duration. Refused (open, bulkhead full): the fallback
// (BreakerOptions.Fallback) with the refusal if one is set, else that
// error. A panic in fn hands the permit back (outcome ignore) and panics
// on; so does a bulkhead ticket, whatever fn does.
func (b *Breaker) Execute(ctx context.Context, fn func(context.Context) error) error {
	return b.ExecuteWithFallback(ctx, fn, b.opts.Fallback)
}

// ExecuteWithFallback is Execute with its own fallback (nil: none).
func (b *Breaker) ExecuteWithFallback(ctx context.Context, fn func(context.Context) error,
	fallback func(context.Context, error) error) error {
	permit, err := b.Acquire(ctx)
	if err != nil {
		if fallback != nil && errors.Is(err, ErrRefused) {
			return fallback(ctx, err)
		}
		return err
	}
	return b.run(ctx, permit, fn)
}

func (b *Breaker) run(ctx context.Context, permit *Permit, fn func(context.Context) error) (err error) {
	started := time.Now()
	done := false
	defer func() {
		if !done {
			// A panic: says nothing about the dependency, the permit goes back.
			_ = b.Report(permit, Ignore, time.Since(started))
		}
	}()
	err = fn(ctx)
	done = true
	_ = b.Report(permit, b.classify(err), time.Since(started))
	return err
}

// classify is the outcome of a call that returned err: a success (nil)
// never reaches the classifier, so one written as "ignore ErrNotFound,
// everything else is a failure" cannot turn successes into failures.
func (b *Breaker) classify(err error) (o Outcome) {
	if err == nil {
		return Success
	}
	defer func() {
		if recover() != nil {
			o = Failure // a classifier that panics counts the call as failed
		}
	}()
	o = b.opts.Classify(err)
	if o < Success || o > Ignore {
		return Failure
	}
	return o
}

// Call runs fn under b and returns its value (see Execute).
func Call[T any](ctx context.Context, b *Breaker, fn func(context.Context) (T, error)) (T, error) {
	var out T
	err := b.Execute(ctx, func(ctx context.Context) error {
		v, err := fn(ctx)
		out = v
		return err
	})
	return out, err
}

// Refresh reads the circuit from cbd (or the local copy) and fires
// OnStateChange for changes other processes made.
func (b *Breaker) Refresh(ctx context.Context) (string, error) {
	cctx, now := b.callCtx()
	var r *GetReply
	answered, err := b.remote("get", func() error {
		var e error
		r, e = b.client.Get(ctx, b.Name, cctx)
		return e
	})
	if answered {
		if err != nil {
			return "", err
		}
		b.noteSnapshot(&r.Snapshot)
		b.observe(r.Snapshot.State, false)
		return r.Snapshot.State, nil
	}
	switch b.opts.StorePolicy {
	case StoreReject:
		return "", err
	case StoreAllow:
		return StateClosed, nil
	}
	b.mu.Lock()
	degraded := b.degraded
	state := b.seen.State
	b.mu.Unlock()
	if degraded {
		state = b.local.Get(b.Name, b.fallbackPolicy(), now).State
	}
	b.observe(state, true)
	return state, nil
}

// Force forces the circuit's state through cbd (set_state, admin).
func (b *Breaker) Force(ctx context.Context, state string) error {
	cctx, _ := b.callCtx()
	s, err := b.client.SetState(ctx, b.Name, state, SetStateOptions{Ctx: cctx})
	if err != nil {
		return err
	}
	b.noteSnapshot(s)
	b.observe(s.State, false)
	return nil
}
