// SPDX-License-Identifier: Apache-2.0

// cache.go — the cached mode of breakers on cbd (libcbclient's
// client/cache.c; README "Cached mode"): one watch connection per process
// and socket path, shared by every cached breaker of the process, keeping
// the state of each circuit those breakers name, and carrying their
// outcomes to cbd as noreply lines.
//
//   - A goroutine owns the connection (run): it connects, watches every
//     name, writes queued outcomes on a cacheFlushPeriod timer while calls
//     flow, and reconnects every cacheReconnectEvery while cbd is away. A
//     reader goroutine per connection applies the watch replies' snapshots
//     and the change/delete events (PROTOCOL.md §8 watch).
//   - An entry is valid only between the watch reply that read it and the
//     loss of the connection: the reader invalidates every entry the moment
//     the connection ends, until the next watch reply re-reads them.
//   - A frozen or hung cbd keeps the connection open: the owner sends a
//     hello on a connection silent for cacheProbeInterval, and one
//     unanswered for cacheProbeTimeout counts as a lost connection.
//   - Decisions read entries under mu (a sync.RWMutex: readers do not
//     contend with each other); output has its own mutex, so queuing an
//     outcome never waits for an event being applied.
//   - A process stops at its own threshold: each entry counts the
//     process's own outcomes since the last snapshot that is known to
//     include them (ownCount). An outcome that could trip the circuit by
//     the rule that snapshot reported is sent with an id instead of
//     noreply, and its caller waits for the reply (cacheSyncTimeout at
//     most), whose snapshot the reader applies before the next line: the
//     next call of the process decides from the state cbd reached. Other
//     processes' trips still arrive as events, one event late.
//   - Writes never block: each is one non-blocking send of everything
//     queued (in order). A failure is written at once by its caller, after
//     what was queued before it; successes wait for the owner's timer, so
//     a stream of closed calls costs one write per period, not one per
//     call. What the socket does not take waits for the next tick. Past
//     MaxCachedOutBytes queued, or with no live connection, the caller
//     reports through the uncached path.
//   - Protocol 3 §1: snapshots are compact (no policy, a policy_rev
//     instead). Each entry keeps the last policy seen with the rev it came
//     with; a snapshot without policy and with another rev makes it
//     unknown (every failure synced, the break read from the snapshot
//     only). The watch and the synced outcomes ask "policy": true, so their
//     replies refresh it, and a policy event (a reload changed the
//     circuit's policy) refreshes it without a state change. A v2 cbd
//     sends the policy in every snapshot and no rev: the same code reads it.
//   - Counted successes (PROTOCOL.md §14 item 12, as libcbclient): every
//     connection starts with a hello; once its reply lists "success" in
//     outcome_counts, a success that is not slow by the cached rule is not
//     queued as a line but counted in an open fold of its breaker's exact
//     line head (breakers of one name may carry different ctx). The folds
//     go out as one line each, with "count" (an older cbd would count such
//     a line as one success: until the reply says so, and after every
//     disconnect, successes go one line each), before any other line is
//     queued, whenever the output is written, at cacheFoldCountMax, when
//     cacheFoldsMax folds are open (all of them then), and at a
//     disconnect or the close, where they are queued lines like any other.

package cbdclient

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Limits of the cached mode (libcbclient's CBC_CACHE_NAMES_MAX and
// CBC_CACHE_OUT_MAX).
const (
	// MaxCachedNames is how many names one process watches per socket;
	// breakers past it take the uncached path (CacheCounters.NamesFull).
	MaxCachedNames = 4096
	// MaxCachedOutBytes bounds the outcomes queued and not yet written;
	// past it outcomes take the uncached path (CacheCounters.OutFull).
	MaxCachedOutBytes = 1 << 20
)

const (
	// Successes wait at most this long before the owner writes them,
	// together; failures are written at once.
	cacheFlushPeriod = time.Millisecond
	// The owner keeps its timer running this many idle periods after the
	// last write, so a steady flow of calls never has to wake it.
	cacheHotPeriods = 50
	// Wait between reconnect attempts while cbd is away.
	cacheReconnectEvery = 20 * time.Millisecond
	// At close, what the socket does not take at once is written by a
	// goroutine of its own as cbd reads it; close waits for it at most
	// cacheCloseFlush (so a process ending right after has it written if
	// cbd reads), then lets it go on (close never waits for cbd). It
	// gives up when cbd has read nothing for cacheCloseTailIdle (a cbd
	// frozen or hung past it loses that tail, which is all it holds).
	cacheCloseFlush    = 200 * time.Millisecond
	cacheCloseTailIdle = time.Minute
	// Names per watch request (each line far below max_line_bytes).
	cacheWatchBatch = 64
	// Longest line accepted from cbd (a watch reply carries about 1 KiB
	// per name); past it the connection is dropped.
	cacheLineMax = MaxCachedNames * 2048
	// A SIGSTOPped or hung cbd keeps the watch connection open, so
	// without a probe the cache would stay live and closed calls would
	// run from it while their failures queue unread. A connection silent
	// this long gets a hello; any line received counts as life.
	cacheProbeInterval = 500 * time.Millisecond
	// A probe unanswered this long (a live cbd answers within a
	// millisecond; the rest is room for a loaded machine) drops the
	// connection as if lost: a frozen cbd is noticed within about 1.5 s,
	// then calls take the uncached path, where the store policy applies.
	cacheProbeTimeout = 1000 * time.Millisecond
	// The probes' ids.
	cacheProbeIDPrefix = "cache-probe-"
	// The ids of outcomes sent with a reply (those that could trip).
	cacheSyncIDPrefix = "cache-sync-"
	// How long a caller waits for the reply to an outcome that could trip
	// (a live cbd answers within a millisecond; a frozen one is noticed
	// by the probe).
	cacheSyncTimeout = cacheProbeTimeout
	// The most folds open at once (successes of as many line heads);
	// one more puts them all in the output.
	cacheFoldsMax = 64
	// The most successes one counted line carries (cbd's
	// PROTO_SUCCESS_COUNT_MAX).
	cacheFoldCountMax = 1000000
)

// CacheMode says whether a breaker decides from the watch cache.
type CacheMode int

// The cache modes (libcbclient's CBC_CACHE_AUTO, _ON, _OFF).
const (
	// CacheAuto: cached unless the breaker has a Clock (the cache keeps
	// real time).
	CacheAuto CacheMode = iota
	// CacheOn: cached; NewBreaker fails when a Clock is given.
	CacheOn
	// CacheOff: every decision asks cbd (allow, then record).
	CacheOff
)

// CacheCounters count what the process's watch cache for one socket did.
type CacheCounters struct {
	Permitted     int64 // closed calls run from the cache (no round trip)
	Refused       int64 // calls refused from the cache (open, held open)
	Uncached      int64 // decisions left to cbd (half_open, break elapsed, not read, no live watch)
	NoReplyLines  int64 // outcomes queued as noreply lines
	Writes        int64 // writes to the watch connection
	StoreReports  int64 // outcomes sent the uncached way instead (no live watch, output full)
	Events        int64 // change, delete and policy events received
	PolicyEvents  int64 // of them, policy events (protocol 3: a reload changed a policy)
	Connects      int64 // watch connections made
	Reconnects    int64 // of them, those after a lost one
	Disconnects   int64 // watch connections lost or dropped
	NamesFull     int64 // names not watched: MaxCachedNames reached
	OutFull       int64 // outcomes that found MaxCachedOutBytes queued
	BadLines      int64 // lines from cbd not understood (or too long)
	Refusals      int64 // watch requests cbd refused (ok: false)
	ProbeTimeouts int64 // connections dropped as cbd left a probe unanswered
	Syncs         int64 // outcomes that could trip, sent with a reply awaited
	SyncTimeouts  int64 // of them, those whose reply did not come in time
	Folded        int64 // successes sent inside counted lines ("count" > 1)
	Names         int64 // names watched now
	Live          bool  // the watch connection is up
}

// cacheEntry is what the cache knows of one circuit (fields under
// watchCache.mu).
type cacheEntry struct {
	name         string
	valid        bool // read by the current connection's watch reply
	state        string
	openedAt     *int64
	breakMs      int64 // current_break_ms, else the policy's break_ms (-1: unknown)
	retryAfterMs int64 // as reported at receivedAt
	receivedAt   int64 // ms since the epoch
	holdState    string
	holdUntil    *int64 // nil: held until released
	seq          uint64 // change and policy events applied
	last         *Snapshot
	applied      uint64    // snapshots applied (replies, events, synced outcomes)
	latest       *Snapshot // the last of them (kept when the entry is invalid)
	own          *ownCount
	// The last policy seen and the policy_rev it came with (nil: none
	// seen, or stale).
	policy    map[string]any
	policyRev uint64
	// The circuit has a bulkhead (a ticket is never granted from the
	// cache) or a retry budget (cbd counts first attempts): ask cbd.
	limited bool
	// The kept policy's slow_call_ms for folding successes (atomic: read
	// without mu by Report): -1 none, cacheFoldUnknown no policy kept.
	foldSlowMs int64
}

// cacheFoldUnknown: no policy kept, so no success is folded (it might be
// slow by a rule not read).
const cacheFoldUnknown = -2

// foldable says whether a success of ms on e may be counted in a fold:
// the kept policy is known and does not make it slow.
func (e *cacheEntry) foldable(ms int64) bool {
	slow := atomic.LoadInt64(&e.foldSlowMs)
	return slow != cacheFoldUnknown && (slow < 0 || ms < slow)
}

// ownCount is the circuit's rule as the last snapshot read reported it,
// the counts that snapshot carried (base) and the process's own outcomes
// since (own): enough to tell whether one more outcome of the process
// could trip the circuit. Own counts are zeroed, and the rule read, only
// from a snapshot known to include them and to be of the stored circuit
// (a change event, the reply to a synced outcome); a watch reply may
// predate the creating request (its policy the defaults, not the
// breaker's) and may or may not include own outcomes, so it only sets
// the base. Until a rule is read every failure is synced. Counting an
// outcome twice costs a round trip, never an overshoot. The rule keeps the
// policy_rev it was read with: a snapshot with another rev and no policy
// (protocol 3) makes it unknown again, until a snapshot that carries the
// policy (a synced outcome's reply, a policy event) is read.
type ownCount struct {
	mu                                     sync.Mutex
	known                                  bool   // a rule was read
	rev                                    uint64 // the policy_rev it was read with
	rate                                   bool   // trip "rate", else consecutive
	countWindow                            bool
	cannotTrip                             bool // held, or min_reporters > 1
	threshold, minCalls, failRate, winSize int64
	slowMs, slowRate                       int64 // slowMs -1: no slow rule
	baseFC, baseCalls, baseFails, baseSlow int64
	ownFC, ownCalls, ownFails, ownSlow     int64
}

func policyInt(p map[string]any, key string, def int64) int64 {
	if v, ok := toInt(p[key]); ok {
		return v
	}
	return def
}

// setBase reads the rule and counts of s; reset: s includes every own
// outcome counted so far (n.mu held).
func (n *ownCount) setBase(s *Snapshot, reset bool) {
	p := s.Policy
	if !reset || p == nil {
		if s.PolicyRev != n.rev {
			n.known = false // stale: the policy changed since
		}
	} else {
		n.known = true
		n.rev = s.PolicyRev
		n.rate = p["trip"] == "rate"
		n.countWindow = p["window"] != "time"
		n.threshold = policyInt(p, "failure_threshold", 5)
		n.minCalls = policyInt(p, "minimum_calls", 10)
		n.failRate = policyInt(p, "failure_rate", 50)
		n.winSize = policyInt(p, "window_size", 100)
		n.slowMs = policyInt(p, "slow_call_ms", -1)
		n.slowRate = policyInt(p, "slow_call_rate", 100)
		n.cannotTrip = s.Hold != nil || policyInt(p, "min_reporters", 1) > 1
	}
	n.baseFC = s.FailureCount
	n.baseCalls, n.baseFails, n.baseSlow = 0, 0, 0
	if s.Window != nil {
		n.baseCalls, n.baseFails, n.baseSlow = s.Window.Calls, s.Window.Failures, s.Window.Slow
	}
	if reset {
		n.ownFC, n.ownCalls, n.ownFails, n.ownSlow = 0, 0, 0, 0
	}
}

// count adds one own outcome (of duration ms) and says whether it could
// trip the circuit: then it must be sent with a reply awaited.
func (n *ownCount) count(o Outcome, ms int64) (couldTrip bool) {
	if o == Ignore {
		return false // changes no rule
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	slow := n.slowMs >= 0 && ms >= n.slowMs
	fail := o == Failure
	if o == Success {
		n.baseFC, n.ownFC = 0, 0
	} else {
		n.ownFC++
	}
	n.ownCalls++
	if fail {
		n.ownFails++
	}
	if slow {
		n.ownSlow++
	}
	if !n.known {
		return fail // no rule read yet: any failure might trip it
	}
	if n.cannotTrip {
		return false
	}
	if !n.rate {
		return fail && n.baseFC+n.ownFC >= n.threshold
	}
	if !fail && !(slow && n.rate) {
		return false
	}
	// The window holds at most base + own calls and at least the larger
	// of the two (either may include the other); failures at most base +
	// own: judge the rate at its highest.
	hi, lo := n.baseCalls+n.ownCalls, n.baseCalls
	if n.ownCalls > lo {
		lo = n.ownCalls
	}
	if n.countWindow && hi > n.winSize {
		hi = n.winSize
	}
	if n.countWindow && lo > n.winSize {
		lo = n.winSize
	}
	if hi < n.minCalls {
		return false
	}
	if fail && (n.baseFails+n.ownFails)*100 >= n.failRate*lo {
		return true
	}
	return slow && n.slowMs >= 0 && (n.baseSlow+n.ownSlow)*100 >= n.slowRate*lo
}

type cacheVerdict int

const (
	cacheAsk cacheVerdict = iota
	cachePermit
	cacheRefuse
)

type watchCache struct {
	socket string
	refs   int // clients using it (under cacheRegistry.mu)

	mu      sync.RWMutex
	entries map[string]*cacheEntry
	live    bool

	outMu     sync.Mutex
	conn      *net.UnixConn // nil while disconnected
	raw       syscall.RawConn
	out       []byte // queued lines; a head sent in part when partial
	partial   bool
	broken    bool // a write failed: the owner drops the connection
	timerOn   bool // the owner flushes every period: no need to wake it
	connected bool // ever connected (reconnects are the connects after)

	// This connection's cbd takes counted successes (its hello reply
	// listed "success" in outcome_counts); false from every connect.
	countsOK bool
	// The open folds (outMu).
	folds []cacheFold

	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	closing atomic.Bool // stopped: the reader applies nothing more

	// Times are durations since epoch (monotonic). lastRecv is set by the
	// reader (atomic); the probe's state belongs to the owner.
	epoch     time.Time
	lastRecv  int64
	probing   bool          // a probe was sent and nothing received since
	probeSent time.Duration // when it was queued
	probeSeq  uint64

	permitted, refused, uncached, noreplyLines, writes, storeReports   int64
	events, connects, reconnects, disconnects, namesFull, outFull, bad int64
	refusals, probeTimeouts, syncs, syncTimeouts, policyEvents         int64
	folded                                                             int64

	// Callers waiting for the reply to an outcome sent with an id.
	syncMu      sync.Mutex
	syncSeq     uint64
	syncWaiters map[string]chan *Snapshot
}

// cacheFold is an open fold: count successes of the line head prefix
// (a breaker's, up to and with "noreply":true).
type cacheFold struct {
	prefix []byte
	count  int64
}

// cacheRegistry holds every watch cache of the process, one per socket.
var cacheRegistry struct {
	mu       sync.Mutex
	bySocket map[string]*watchCache
}

// acquireWatchCache is the process's cache for socket, started on first use.
func acquireWatchCache(socket string) *watchCache {
	cacheRegistry.mu.Lock()
	defer cacheRegistry.mu.Unlock()
	c := cacheRegistry.bySocket[socket]
	if c == nil {
		c = &watchCache{socket: socket, entries: map[string]*cacheEntry{},
			wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
			epoch: time.Now()}
		if cacheRegistry.bySocket == nil {
			cacheRegistry.bySocket = map[string]*watchCache{}
		}
		cacheRegistry.bySocket[socket] = c
		go c.run()
	}
	c.refs++
	return c
}

// releaseWatchCache drops one use; the last one writes the queued
// outcomes (closeConn: never waiting for cbd) and stops the connection.
func releaseWatchCache(c *watchCache) {
	cacheRegistry.mu.Lock()
	c.refs--
	last := c.refs == 0
	if last {
		delete(cacheRegistry.bySocket, c.socket)
	}
	cacheRegistry.mu.Unlock()
	if last {
		close(c.stop)
		<-c.done
	}
}

// watchCacheCounters is the counters of the process's cache for socket
// (zero when none runs).
func watchCacheCounters(socket string) CacheCounters {
	cacheRegistry.mu.Lock()
	c := cacheRegistry.bySocket[socket]
	cacheRegistry.mu.Unlock()
	if c == nil {
		return CacheCounters{}
	}
	return c.counters()
}

func (c *watchCache) counters() CacheCounters {
	c.mu.RLock()
	names, live := int64(len(c.entries)), c.live
	c.mu.RUnlock()
	ld := atomic.LoadInt64
	return CacheCounters{Permitted: ld(&c.permitted), Refused: ld(&c.refused),
		Uncached: ld(&c.uncached), NoReplyLines: ld(&c.noreplyLines), Writes: ld(&c.writes),
		StoreReports: ld(&c.storeReports), Events: ld(&c.events), Connects: ld(&c.connects),
		Reconnects: ld(&c.reconnects), Disconnects: ld(&c.disconnects),
		NamesFull: ld(&c.namesFull), OutFull: ld(&c.outFull), BadLines: ld(&c.bad),
		Refusals: ld(&c.refusals), ProbeTimeouts: ld(&c.probeTimeouts), Syncs: ld(&c.syncs),
		SyncTimeouts: ld(&c.syncTimeouts), PolicyEvents: ld(&c.policyEvents), Names: names,
		Live: live, Folded: ld(&c.folded)}
}

func (c *watchCache) poke() {
	select {
	case c.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// watch adds name to the watched names; nil past MaxCachedNames.
func (c *watchCache) watch(name string) *cacheEntry {
	c.mu.Lock()
	e := c.entries[name]
	created := false
	if e == nil {
		if len(c.entries) >= MaxCachedNames {
			c.mu.Unlock()
			atomic.AddInt64(&c.namesFull, 1)
			return nil
		}
		e = &cacheEntry{name: name, breakMs: -1, own: &ownCount{}, foldSlowMs: cacheFoldUnknown}
		c.entries[name] = e
		created = true
	}
	c.mu.Unlock()
	if created {
		// A connection made before the name was added did not watch it
		// (one made after did: both at worst, which is harmless).
		c.outMu.Lock()
		if c.conn != nil && !c.broken {
			if !c.queueWatchLocked([]string{name}) {
				c.broken = true
			}
			c.flushLocked()
			if c.broken || len(c.out) > 0 {
				c.poke()
			}
		}
		c.outMu.Unlock()
	}
	return e
}

// queueWatchLocked appends watch requests for names (outMu held).
func (c *watchCache) queueWatchLocked(names []string) bool {
	for i := 0; i < len(names); i += cacheWatchBatch {
		j := i + cacheWatchBatch
		if j > len(names) {
			j = len(names)
		}
		// The initial snapshots with their policies (protocol 3; a v2 cbd
		// ignores the member and sends them anyway).
		line, err := json.Marshal(map[string]any{"op": "watch", "names": names[i:j], "policy": true})
		if err != nil || len(c.out)+len(line)+1 > MaxCachedOutBytes {
			return false
		}
		c.putFoldsLocked()
		c.out = append(append(c.out, line...), '\n')
	}
	return true
}

// putFoldsLocked queues every open fold as one line (outMu held): its
// head, then ,"count":N} (N > 1; else the plain line), past
// MaxCachedOutBytes too (at most cacheFoldsMax lines, fewer than those
// they replace).
func (c *watchCache) putFoldsLocked() {
	for i := range c.folds {
		f := &c.folds[i]
		c.out = append(c.out, f.prefix...)
		if f.count > 1 {
			c.out = append(c.out, `,"count":`...)
			c.out = strconv.AppendInt(c.out, f.count, 10)
			atomic.AddInt64(&c.folded, f.count)
		}
		c.out = append(c.out, '}', '\n')
		atomic.AddInt64(&c.noreplyLines, 1)
	}
	c.folds = c.folds[:0]
}

// fold counts one success of the line head prefix in its open fold
// instead of queuing its line, when this connection's cbd takes counted
// successes (the caller checked that the success is not slow by the
// cached rule). hint: the caller's fold the last time (checked before
// use: a stale one costs a search). The hot path: a comparison with that
// fold and an increment. False: send its line.
func (c *watchCache) fold(prefix []byte, hint *atomic.Int32) bool {
	c.outMu.Lock()
	if !c.countsOK || c.conn == nil || c.broken {
		c.outMu.Unlock()
		return false
	}
	i := int(hint.Load())
	if i >= len(c.folds) || !bytes.Equal(c.folds[i].prefix, prefix) {
		i = -1
		for j := range c.folds {
			if bytes.Equal(c.folds[j].prefix, prefix) {
				i = j
				break
			}
		}
		if i < 0 {
			if len(c.folds) == cacheFoldsMax {
				c.putFoldsLocked()
			}
			// (prefix is the breaker's, never changed: kept, not copied.)
			c.folds = append(c.folds, cacheFold{prefix: prefix})
			i = len(c.folds) - 1
		}
		hint.Store(int32(i))
	}
	c.folds[i].count++
	if c.folds[i].count == cacheFoldCountMax {
		c.putFoldsLocked()
	}
	if !c.timerOn {
		c.timerOn = true
		c.poke()
	}
	c.outMu.Unlock()
	return true
}

// noteHello reads a hello reply's outcome_counts on conn (the reader's;
// nil: the current one): counted successes once it lists "success".
func (c *watchCache) noteHello(conn net.Conn, counts []any) {
	takes := false
	for _, v := range counts {
		if s, ok := v.(string); ok && s == "success" {
			takes = true
		}
	}
	c.outMu.Lock()
	if c.conn != nil && !c.broken && (conn == nil || net.Conn(c.conn) == conn) {
		c.countsOK = takes
	}
	c.outMu.Unlock()
}

// flushLocked sends what the socket takes now, without waiting (outMu
// held); the open folds go with it (a success waits at most one flush,
// as its line would).
func (c *watchCache) flushLocked() {
	if len(c.folds) > 0 && c.conn != nil && !c.broken {
		c.putFoldsLocked()
	}
	for c.conn != nil && !c.broken && len(c.out) > 0 {
		var n int
		var werr error
		err := c.raw.Write(func(fd uintptr) bool {
			n, werr = syscall.Write(int(fd), c.out)
			return true // one attempt: never wait for room
		})
		if err == nil {
			err = werr
		}
		if n > 0 {
			atomic.AddInt64(&c.writes, 1)
			c.partial = c.out[n-1] != '\n'
			c.out = c.out[:copy(c.out, c.out[n:])]
			continue
		}
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if !errors.Is(err, syscall.EAGAIN) {
			c.broken = true
		}
		return // full socket: the rest goes on a later tick
	}
}

// send queues one outcome line: prefix, then ms and "}\n". An urgent one
// (a failure) is written at once, after everything queued before it.
// False: not queued (no live connection, output full): report it the
// uncached way.
func (c *watchCache) send(prefix []byte, ms int64, urgent bool) bool {
	c.outMu.Lock()
	defer c.outMu.Unlock()
	if c.conn == nil || c.broken {
		atomic.AddInt64(&c.storeReports, 1)
		return false
	}
	if len(c.out)+len(prefix)+22 > MaxCachedOutBytes {
		atomic.AddInt64(&c.outFull, 1)
		atomic.AddInt64(&c.storeReports, 1)
		return false
	}
	// (Open folds go before the line: not idle then.)
	idle := len(c.out) == 0 && len(c.folds) == 0
	c.putFoldsLocked()
	c.out = append(c.out, prefix...)
	c.out = strconv.AppendInt(c.out, ms, 10)
	c.out = append(c.out, '}', '\n')
	if urgent {
		c.flushLocked()
		if idle && c.broken {
			// cbd went away under us and the line was not written: the
			// uncached path reports it (and degrades as its policy says).
			c.out = c.out[:0]
			c.partial = false
			atomic.AddInt64(&c.storeReports, 1)
			c.poke()
			return false
		}
	}
	atomic.AddInt64(&c.noreplyLines, 1)
	if !c.timerOn && (len(c.out) > 0 || c.broken) {
		c.timerOn = true
		c.poke()
	}
	return true
}

// sendSync sends one outcome line that could trip the circuit with an id
// (prefix, then ms, the id and "}\n"), after everything queued, and waits
// for its reply (at most cacheSyncTimeout): the snapshot cbd answered
// with, applied to the entry before the reader reads on. sent false: not
// written (no live connection): report it the uncached way.
func (c *watchCache) sendSync(prefix []byte, ms int64) (snap *Snapshot, sent bool) {
	c.outMu.Lock()
	if c.conn == nil || c.broken {
		c.outMu.Unlock()
		atomic.AddInt64(&c.storeReports, 1)
		return nil, false
	}
	c.syncMu.Lock()
	c.syncSeq++
	id := cacheSyncIDPrefix + strconv.FormatUint(c.syncSeq, 10)
	ch := make(chan *Snapshot, 1)
	if c.syncWaiters == nil {
		c.syncWaiters = map[string]chan *Snapshot{}
	}
	c.syncWaiters[id] = ch
	c.syncMu.Unlock()
	idle := len(c.out) == 0 && len(c.folds) == 0
	// Past MaxCachedOutBytes too: it is one line, and it matters most.
	c.putFoldsLocked()
	c.out = append(c.out, prefix...)
	c.out = strconv.AppendInt(c.out, ms, 10)
	c.out = append(c.out, `,"id":"`...)
	c.out = append(c.out, id...)
	c.out = append(c.out, '"', '}', '\n')
	c.flushLocked()
	if idle && c.broken {
		c.out = c.out[:0]
		c.partial = false
		c.outMu.Unlock()
		c.dropWaiter(id)
		atomic.AddInt64(&c.storeReports, 1)
		c.poke()
		return nil, false
	}
	if !c.timerOn && (len(c.out) > 0 || c.broken) {
		c.timerOn = true
		c.poke()
	}
	c.outMu.Unlock()
	atomic.AddInt64(&c.syncs, 1)
	timer := time.NewTimer(cacheSyncTimeout)
	defer timer.Stop()
	select {
	case snap = <-ch:
	case <-timer.C:
		c.dropWaiter(id)
		atomic.AddInt64(&c.syncTimeouts, 1)
	}
	return snap, true
}

func (c *watchCache) dropWaiter(id string) {
	c.syncMu.Lock()
	delete(c.syncWaiters, id)
	c.syncMu.Unlock()
}

// wakeWaiters answers every caller still waiting (the connection ended).
func (c *watchCache) wakeWaiters() {
	c.syncMu.Lock()
	for id, ch := range c.syncWaiters {
		ch <- nil
		delete(c.syncWaiters, id)
	}
	c.syncMu.Unlock()
}

// told is the state cbd answered a breaker's last uncached request with,
// and the entry's seq then: until an event comes, a different cached
// state is older than that answer (its event is on its way).
type told struct {
	seq   uint64
	state string
}

// seqOf is e's count of change events applied.
func (c *watchCache) seqOf(e *cacheEntry) uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return e.seq
}

// decide is the cache's verdict on one call of e, with the refusal's
// retry_after_ms; fresh is e's last change event when *seen has not
// seen it yet. t: the breaker's last uncached answer (nil: none).
// latest: the last snapshot applied to e when *read has not noted it
// (the breaker's fallback starts from it).
func (c *watchCache) decide(e *cacheEntry, seen, read *uint64, t *told) (v cacheVerdict, retryAfterMs int64, fresh, latest *Snapshot) {
	c.mu.RLock()
	if seq := e.seq; seq != atomic.LoadUint64(seen) {
		fresh = e.last
		atomic.StoreUint64(seen, seq)
	}
	if n := e.applied; n != atomic.LoadUint64(read) {
		latest = e.latest
		atomic.StoreUint64(read, n)
	}
	v = cacheAsk
	if c.live && e.valid && (t == nil || t.seq != e.seq || t.state == e.state) {
		now := time.Now().UnixMilli()
		switch {
		case e.holdState == StateOpen:
			// Held open: refused until the hold ends (its until, else
			// until released whatever the countdown says).
			if e.holdUntil != nil {
				retryAfterMs = *e.holdUntil - now
			} else {
				retryAfterMs = e.retryAfterMs - (now - e.receivedAt)
				if retryAfterMs <= 0 {
					retryAfterMs = 1
				}
			}
			if retryAfterMs > 0 {
				v = cacheRefuse
			}
		case e.state == StateClosed && !e.limited:
			// A bulkhead's tickets and a retry budget's first attempts
			// are cbd's to count (limited: ask).
			v = cachePermit
		case e.state == StateOpen:
			if e.openedAt != nil && e.breakMs >= 0 {
				retryAfterMs = *e.openedAt + e.breakMs - now
			} else {
				retryAfterMs = e.retryAfterMs - (now - e.receivedAt)
			}
			if retryAfterMs > e.breakMs && e.breakMs >= 0 {
				retryAfterMs = e.breakMs // cbd's clock a little behind ours
			}
			if retryAfterMs > 0 {
				v = cacheRefuse
			}
		}
	}
	c.mu.RUnlock()
	switch v {
	case cachePermit:
		atomic.AddInt64(&c.permitted, 1)
	case cacheRefuse:
		atomic.AddInt64(&c.refused, 1)
	default:
		atomic.AddInt64(&c.uncached, 1)
	}
	return v, retryAfterMs, fresh, latest
}

// cacheSnapshot is a snapshot as the cache reads it: current_break_ms
// absent (protocol 1) is told from 0.
type cacheSnapshot struct {
	Snapshot
	CurrentBreakMs *int64 `json:"current_break_ms"`
}

// cacheLine is a reply or event line from cbd.
type cacheLine struct {
	Ok        *bool            `json:"ok"`
	Event     string           `json:"event"`
	Name      string           `json:"name"`
	Snapshot  *cacheSnapshot   `json:"snapshot"`
	Snapshots []*cacheSnapshot `json:"snapshots"`
	ID        any              `json:"id"`
	// A hello's reply: the outcomes cbd takes with a count.
	OutcomeCounts []any `json:"outcome_counts"`
}

func validState(s string) bool {
	return s == StateClosed || s == StateOpen || s == StateHalfOpen
}

// apply sets e from a snapshot (mu held); reset: the snapshot includes
// every own outcome counted so far (an event's, a synced outcome's). A
// compact snapshot (protocol 3) of the kept policy's rev gets that policy
// filled in, so the breakers see a policy whenever it is known.
func (e *cacheEntry) apply(s *cacheSnapshot, now int64, reset bool) {
	switch {
	case s.Policy != nil:
		e.policy, e.policyRev = s.Policy, s.PolicyRev
	case s.PolicyRev != e.policyRev:
		e.policy = nil // stale: the circuit's policy changed since
	default:
		s.Policy = e.policy
	}
	fold := int64(cacheFoldUnknown)
	if e.policy != nil {
		fold = policyInt(e.policy, "slow_call_ms", -1)
	}
	atomic.StoreInt64(&e.foldSlowMs, fold)
	e.own.mu.Lock()
	e.own.setBase(&s.Snapshot, reset)
	e.own.mu.Unlock()
	e.valid = true
	e.state = s.State
	e.openedAt = s.OpenedAt
	e.breakMs = -1
	if s.CurrentBreakMs != nil && *s.CurrentBreakMs >= 0 {
		e.breakMs = *s.CurrentBreakMs
	} else if bm, ok := toInt(s.Policy["break_ms"]); ok {
		e.breakMs = bm
	}
	e.retryAfterMs = s.RetryAfterMs
	e.receivedAt = now
	e.limited = s.InFlight != nil || (s.Policy != nil &&
		(s.Policy["max_concurrent"] != nil || s.Policy["retry_budget_percent"] != nil))
	e.holdState, e.holdUntil = "", nil
	if s.Hold != nil {
		e.holdState, e.holdUntil = s.Hold.State, s.Hold.Until
	}
}

// applySnapshot applies one snapshot of a reply or an event (sync: the
// reply to an outcome sent with an id).
func (c *watchCache) applySnapshot(s *cacheSnapshot, event, sync bool) {
	if s == nil || s.Name == "" {
		atomic.AddInt64(&c.bad, 1)
		return
	}
	now := time.Now().UnixMilli()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[s.Name]
	if e == nil {
		return
	}
	if !validState(s.State) {
		atomic.AddInt64(&c.bad, 1)
		e.valid = false // cannot tell its state: ask cbd
		return
	}
	e.apply(s, now, event || sync)
	latest := s.Snapshot
	latest.CurrentBreakMs = e.breakMs
	e.latest = &latest
	e.applied++
	if event {
		snap := s.Snapshot
		snap.CurrentBreakMs = e.breakMs
		e.last = &snap
		e.seq++
	}
}

// applyLine applies one line from cbd as if read on the current connection.
func (c *watchCache) applyLine(raw []byte) { c.applyLineOn(raw, nil) }

// applyLineOn applies one line from cbd read on conn (the reader goroutine).
func (c *watchCache) applyLineOn(raw []byte, conn net.Conn) {
	var l cacheLine
	if err := json.Unmarshal(raw, &l); err != nil {
		atomic.AddInt64(&c.bad, 1)
		return
	}
	switch {
	case isProbeID(l.ID):
		// A hello's reply (the connect's or a probe's): its arrival
		// (counted by the reader) is a sign of life, and it says whether
		// this cbd takes counted successes (an older one has no
		// outcome_counts, and counts such a line as one success).
		c.noteHello(conn, l.OutcomeCounts)
	case isSyncID(l.ID):
		// The reply to an outcome that could trip: applied before the
		// next line, then its caller goes on.
		var snap *Snapshot
		if l.Ok != nil && *l.Ok && l.Snapshot != nil {
			c.applySnapshot(l.Snapshot, false, true)
			s := l.Snapshot.Snapshot
			snap = &s
		}
		id, _ := l.ID.(string)
		c.syncMu.Lock()
		if ch := c.syncWaiters[id]; ch != nil {
			ch <- snap
			delete(c.syncWaiters, id)
		}
		c.syncMu.Unlock()
	case l.Event == "change":
		atomic.AddInt64(&c.events, 1)
		c.applySnapshot(l.Snapshot, true, false)
	case l.Event == "policy":
		// A reload changed the circuit's policy (protocol 3): the rule and
		// the entry refresh, the state is as it was; the breakers read it
		// as they read a change event's snapshot.
		atomic.AddInt64(&c.events, 1)
		atomic.AddInt64(&c.policyEvents, 1)
		c.applySnapshot(l.Snapshot, true, false)
	case l.Event == "delete":
		atomic.AddInt64(&c.events, 1)
		c.mu.Lock()
		if e := c.entries[l.Name]; e != nil && e.valid {
			// Gone: the next call creates it closed.
			e.state, e.openedAt, e.holdState, e.holdUntil = StateClosed, nil, "", nil
		}
		c.mu.Unlock()
	case l.Event != "":
		// An event this client does not know: nothing to apply.
	case l.Ok != nil && *l.Ok:
		for _, s := range l.Snapshots {
			c.applySnapshot(s, false, false)
		}
	case l.Ok != nil:
		// ok: false to a watch (a protocol 1 cbd): entries stay invalid
		// and breakers keep asking cbd.
		atomic.AddInt64(&c.refusals, 1)
	default:
		atomic.AddInt64(&c.bad, 1)
	}
}

func isProbeID(id any) bool {
	s, ok := id.(string)
	return ok && strings.HasPrefix(s, cacheProbeIDPrefix)
}

func isSyncID(id any) bool {
	s, ok := id.(string)
	return ok && strings.HasPrefix(s, cacheSyncIDPrefix)
}

// sinceEpoch is now on the cache's monotonic clock.
func (c *watchCache) sinceEpoch() time.Duration { return time.Since(c.epoch) }

// read applies every line of conn until it ends; then the cache is
// invalid at once, before the owner even notices.
func (c *watchCache) read(conn net.Conn, lost chan<- struct{}) {
	defer close(lost)
	rd := bufio.NewReaderSize(conn, readBufBytes)
	var line []byte
	answered := false
	for {
		part, more, err := rd.ReadLine()
		if err != nil {
			break
		}
		if c.closing.Load() {
			continue // closed: read on only until the tail is written
		}
		if !answered {
			// Live once cbd answered on this connection: a frozen cbd's
			// backlog accepts a connection that nothing will ever read.
			answered = true
			c.mu.Lock()
			c.live = true
			c.mu.Unlock()
		}
		// Anything received, even part of a long watch reply, shows cbd
		// is alive.
		atomic.StoreInt64(&c.lastRecv, int64(c.sinceEpoch()))
		line = append(line, part...)
		if len(line) > cacheLineMax {
			atomic.AddInt64(&c.bad, 1)
			break
		}
		if more {
			continue
		}
		if len(line) > 0 {
			c.applyLineOn(line, conn)
		}
		line = line[:0]
	}
	c.invalidate()
	c.wakeWaiters()
}

// invalidate marks the connection down and every entry unread.
func (c *watchCache) invalidate() {
	c.mu.Lock()
	c.live = false
	for _, e := range c.entries {
		e.valid = false
	}
	c.mu.Unlock()
}

// connect makes a watch connection and watches every name; the reader's
// lost channel, nil when cbd is not there.
func (c *watchCache) connect() chan struct{} {
	conn, err := net.DialTimeout("unix", c.socket, DefaultConnectTimeout)
	if err != nil {
		return nil
	}
	uc, ok := conn.(*net.UnixConn)
	var raw syscall.RawConn
	if ok {
		raw, err = uc.SyscallConn()
	}
	if !ok || err != nil {
		conn.Close()
		return nil
	}
	c.mu.Lock()
	names := make([]string, 0, len(c.entries))
	for name := range c.entries {
		names = append(names, name)
	}
	c.mu.Unlock()
	// A new connection starts silent, with no probe outstanding.
	atomic.StoreInt64(&c.lastRecv, int64(c.sinceEpoch()))
	c.probing = false
	c.outMu.Lock()
	c.conn, c.raw, c.broken = uc, raw, false
	atomic.AddInt64(&c.connects, 1)
	if c.connected {
		atomic.AddInt64(&c.reconnects, 1)
	}
	c.connected = true
	// Outcomes queued before (whole lines only) go first. The watch
	// reply (a hello's without names) makes the connection live. The
	// hello's reply says whether this cbd takes counted successes: until
	// it does, every success goes as a line of its own.
	c.countsOK = false
	if !c.queueWatchLocked(names) {
		c.broken = true
	}
	c.putFoldsLocked()
	c.probeSeq++
	c.out = append(c.out, `{"op":"hello","id":"`+cacheProbeIDPrefix+strconv.FormatUint(c.probeSeq, 10)+"\"}\n"...)
	c.flushLocked()
	c.outMu.Unlock()
	lost := make(chan struct{})
	go c.read(uc, lost)
	return lost
}

// disconnect closes the connection and waits for its reader; lines not
// yet written stay queued for the next one (a line half written is
// dropped: its head went to this one).
func (c *watchCache) disconnect(lost chan struct{}) {
	c.outMu.Lock()
	closed := c.conn != nil
	if closed {
		c.conn.Close()
	}
	c.conn, c.raw, c.broken = nil, nil, false
	if c.partial {
		drop := len(c.out)
		for i, b := range c.out {
			if b == '\n' {
				drop = i + 1
				break
			}
		}
		c.out = c.out[:copy(c.out, c.out[drop:])]
		c.partial = false
	}
	// The open folds are queued lines too: kept for the next connection
	// (whose cbd folds nothing until its hello reply says so).
	c.countsOK = false
	c.putFoldsLocked()
	c.outMu.Unlock()
	<-lost
	c.invalidate()
	// Counted once the entries are invalid (as a probe timeout): a reader
	// who sees the count sees the cache down.
	if closed {
		atomic.AddInt64(&c.disconnects, 1)
	}
}

// probe checks that cbd still answers on the connection (the owner):
// expired when a probe went unanswered for cacheProbeTimeout; else how
// long until the next look (0: no names, nothing to look after). A
// connection silent for cacheProbeInterval gets a probe.
func (c *watchCache) probe() (wait time.Duration, expired bool) {
	c.mu.RLock()
	names := len(c.entries)
	c.mu.RUnlock()
	if names == 0 {
		c.probing = false
		return 0, false
	}
	now := c.sinceEpoch()
	last := time.Duration(atomic.LoadInt64(&c.lastRecv))
	if c.probing && last >= c.probeSent {
		c.probing = false // a line since the probe: cbd is alive
	}
	if c.probing {
		if left := c.probeSent + cacheProbeTimeout - now; left > 0 {
			return left, false
		}
		return 0, true
	}
	if left := last + cacheProbeInterval - now; left > 0 {
		return left, false
	}
	c.probeSeq++
	line := `{"op":"hello","id":"` + cacheProbeIDPrefix + strconv.FormatUint(c.probeSeq, 10) + "\"}\n"
	c.outMu.Lock()
	if c.conn != nil && !c.broken {
		// After whatever is queued, past MaxCachedOutBytes too: a full
		// queue is what a frozen cbd leaves.
		c.putFoldsLocked()
		c.out = append(c.out, line...)
		c.flushLocked()
	}
	c.outMu.Unlock()
	c.probing, c.probeSent = true, now
	return cacheProbeTimeout, false
}

// closeConn ends the connection at close (the owner, lost its reader's
// channel, nil without a connection). Everything queued is written now,
// in order, as far as the socket takes it; the rest (cbd reads nothing:
// frozen, or slower than the queue) by a goroutine of its own, which
// closes the connection once it is written or cbd has read nothing for
// cacheCloseTailIdle: no timer of a loaded machine drops what breakers
// queued before their Close, and close waits for cbd at most
// cacheCloseFlush (a process ending then loses what is left). Lines kept
// from a lost connection get one connect of their own (for a Unix socket
// it succeeds or fails at once).
func (c *watchCache) closeConn(lost chan struct{}) {
	c.closing.Store(true)
	c.invalidate()
	c.wakeWaiters() // no reply is read from now on
	c.outMu.Lock()
	c.putFoldsLocked() // the open folds are queued lines too
	if c.conn == nil && len(c.out) > 0 {
		c.outMu.Unlock()
		lost = c.connect()
		c.outMu.Lock()
	}
	conn := c.conn
	if conn == nil {
		c.out = nil
		c.outMu.Unlock()
		return
	}
	c.flushLocked()
	tail := c.out
	if c.broken {
		tail = nil
	}
	c.conn, c.raw, c.out = nil, nil, nil
	c.outMu.Unlock()
	atomic.AddInt64(&c.disconnects, 1)
	if len(tail) == 0 {
		conn.Close()
		<-lost
		return
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		for len(tail) > 0 {
			chunk := tail
			if len(chunk) > 64<<10 {
				chunk = chunk[:64<<10]
			}
			_ = conn.SetWriteDeadline(time.Now().Add(cacheCloseTailIdle))
			n, err := conn.Write(chunk)
			tail = tail[n:]
			if err != nil {
				break
			}
		}
		conn.Close()
		<-lost
	}()
	wait := time.NewTimer(cacheCloseFlush)
	defer wait.Stop()
	select {
	case <-written:
	case <-wait.C: // it goes on without us
	}
}

// run is the goroutine owning the watch connection.
func (c *watchCache) run() {
	defer close(c.done)
	var lost chan struct{}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	idle := 0
	for {
		if lost == nil {
			lost = c.connect()
		}
		var probeWait time.Duration
		if lost != nil {
			var expired bool
			if probeWait, expired = c.probe(); expired {
				// cbd does not answer: as if the connection were lost
				// (reconnecting to a frozen cbd may succeed, but its
				// watch reply never comes: entries stay invalid).
				// Counted once the entries are invalid: a reader who
				// sees the count sees them invalid.
				c.disconnect(lost)
				atomic.AddInt64(&c.probeTimeouts, 1)
				lost = nil
				continue
			}
		}
		// Whether output is pending and whether callers must wake us are
		// decided together: a line queued in between would wait forever.
		c.outMu.Lock()
		broken := c.broken
		wait := time.Duration(0)
		switch {
		case lost == nil:
			wait = cacheReconnectEvery
		case len(c.out) > 0 || len(c.folds) > 0 || idle < cacheHotPeriods:
			wait = cacheFlushPeriod
		}
		c.timerOn = wait == cacheFlushPeriod && !broken
		c.outMu.Unlock()
		if broken {
			c.disconnect(lost)
			lost = nil
			continue
		}
		if probeWait > 0 && (wait == 0 || probeWait < wait) {
			wait = probeWait
		}
		var tick <-chan time.Time
		if wait > 0 {
			timer.Reset(wait)
			tick = timer.C
		}
		select {
		case <-c.stop:
			timer.Stop()
			c.closeConn(lost)
			return
		case <-lost:
			c.disconnect(lost)
			lost = nil
		case <-c.wake:
			idle = 0
		case <-tick:
			tick = nil
			c.outMu.Lock()
			if len(c.out) == 0 && len(c.folds) == 0 {
				idle++
			} else {
				idle = 0
			}
			c.flushLocked()
			c.outMu.Unlock()
		}
		if tick != nil && !timer.Stop() {
			<-timer.C
		}
	}
}
