// SPDX-License-Identifier: Apache-2.0

// ops.go — every op of PROTOCOL.md §8 as a Client method with typed
// results: hello, get, allow, record (with duration_ms and permit),
// record_success, record_failure, cas, set_state (hold, ttl_ms, reason),
// release, acquire_slot, release_slot, delete, list (one page, or every
// circuit by following the cursor), stats, metrics. Refusals come back as
// *Error with cbd's code and message.

package cbdclient

import (
	"context"
	"encoding/json"
	"fmt"
)

// Hold is who holds a circuit in which state (§9).
type Hold struct {
	State  string  `json:"state"`
	ByUID  int64   `json:"by_uid"`
	ByUser string  `json:"by_user"`
	Reason *string `json:"reason"`
	Since  int64   `json:"since"`
	Until  *int64  `json:"until"`
}

// Totals are a circuit's counts since it was created (§7).
type Totals struct {
	Successes int64 `json:"successes"`
	Failures  int64 `json:"failures"`
	Ignored   int64 `json:"ignored"`
	Slow      int64 `json:"slow"`
	Rejected  int64 `json:"rejected"`
	// Protocol 3 (§7b): allow calls refused for want of a bulkhead ticket,
	// retries granted, retries the retry budget refused.
	RejectedConcurrency int64 `json:"rejected_concurrency"`
	Retries             int64 `json:"retries"`
	RejectedRetry       int64 `json:"rejected_retry"`
}

// WindowView is what a rate circuit's window holds (§7).
type WindowView struct {
	Calls        int64   `json:"calls"`
	Failures     int64   `json:"failures"`
	Slow         int64   `json:"slow"`
	FailureRate  float64 `json:"failure_rate"`
	SlowCallRate float64 `json:"slow_call_rate"`
}

// Snapshot is a circuit as cbd reports it (§7). Policy is the effective
// policy as sent (numbers as float64, null as nil). Protocol 3 §1: a
// snapshot carries PolicyRev (two snapshots of a circuit with the same rev
// have the same policy) and Policy only on Get, with a Policy option
// (RecordOptions, SetStateOptions, ListPolicy) and in policy events; a v2
// cbd sends Policy in every snapshot and no rev (PolicyRev 0).
type Snapshot struct {
	Name           string         `json:"name"`
	State          string         `json:"state"`
	FailureCount   int64          `json:"failure_count"`
	SuccessCount   int64          `json:"success_count"`
	LastFailureAt  *int64         `json:"last_failure_at"`
	OpenedAt       *int64         `json:"opened_at"`
	RetryAfterMs   int64          `json:"retry_after_ms"`
	CurrentBreakMs int64          `json:"current_break_ms"`
	PolicyRev      uint64         `json:"policy_rev"`
	Policy         map[string]any `json:"policy"`
	Hold           *Hold          `json:"hold"`
	Totals         *Totals        `json:"totals"`
	Window         *WindowView    `json:"window"`
	Reporters      *int64         `json:"reporters"`
	// InFlight: the bulkhead's tickets out (only with max_concurrent).
	InFlight *int64 `json:"in_flight"`
}

// Hello is hello's answer.
type Hello struct {
	Server   string `json:"server"`
	Version  string `json:"version"`
	Protocol int    `json:"protocol"`
}

// GetReply is get's answer: whether cbd stores the circuit, and its
// snapshot.
type GetReply struct {
	Stored   bool     `json:"stored"`
	Snapshot Snapshot `json:"snapshot"`
}

// AllowReply is allow's answer; Permit is set when a half-open slot was
// taken (hand it back with Record).
type AllowReply struct {
	Allowed      bool   `json:"allowed"`
	State        string `json:"state"`
	Permit       string `json:"permit"`
	ExpiresAt    int64  `json:"expires_at"`
	RetryAfterMs int64  `json:"retry_after_ms"`
	// Reason says why a call was refused (protocol 3): "open", "held",
	// "half_open_full", "concurrency" or "retry_budget".
	Reason string `json:"reason"`
	// InFlight: the tickets out when refused for "concurrency".
	InFlight *int64 `json:"in_flight"`
}

// AllowOptions are allow's optional members (protocol 3): WaitMs, how
// long cbd may wait for a bulkhead ticket (0..60000; cbd reads nothing
// else of the connection meanwhile and answers up to WaitMs past the
// IOTimeout: use a Client of its own with a longer IOTimeout, as Breaker
// does), and Retry, the call is a retry (counted by the retry budget).
type AllowOptions struct {
	WaitMs int64
	Retry  bool
}

// RecordOptions are record's optional members. DurationMs < 0 is left out.
type RecordOptions struct {
	Permit     string
	DurationMs int64
	Ctx        Ctx
	NoReply    bool
	Policy     bool // the snapshot carries the policy (protocol 3)
}

// SetStateOptions are set_state's optional members (§9).
type SetStateOptions struct {
	Hold   bool
	TTLMs  int64 // with Hold; 0: no ttl
	Reason string
	Ctx    Ctx
	Policy bool // the snapshot carries the policy (protocol 3)
}

// CasReply is cas's answer.
type CasReply struct {
	Applied  bool     `json:"applied"`
	Snapshot Snapshot `json:"snapshot"`
}

// ReleaseReply is release's answer.
type ReleaseReply struct {
	Released bool     `json:"released"`
	Snapshot Snapshot `json:"snapshot"`
}

// Slot is acquire_slot's answer.
type Slot struct {
	Acquired  bool   `json:"acquired"`
	Token     string `json:"token"`
	ExpiresAt int64  `json:"expires_at"`
}

// ListReply is list's answer (one page). Truncated says circuits were left
// out (by ListLimit or by cbd's output bound); Cursor, "" on the last page,
// asks for the next page with ListCursor on the same Client.
type ListReply struct {
	Circuits  []Snapshot `json:"circuits"`
	Truncated bool       `json:"truncated"`
	Cursor    string     `json:"cursor"`
}

// MaxListLimit is the most circuits one list page may be asked for.
const MaxListLimit = 100000

// ListOption is a paging member of a list request: ListLimit, ListCursor.
type ListOption func(*listPaging)

type listPaging struct {
	limit    int // 0: as many as fit cbd's output bound
	limitSet bool
	cursor   string
	policy   bool
}

// ListLimit asks for at most n circuits (1..MaxListLimit) in the page.
func ListLimit(n int) ListOption {
	return func(p *listPaging) { p.limit, p.limitSet = n, true }
}

// ListCursor asks for the page after the one whose reply carried cursor.
// A cursor is good on the Client it came from, until that Client's next
// list; the listing keeps the state filter it started with.
func ListCursor(cursor string) ListOption {
	return func(p *listPaging) { p.cursor = cursor }
}

// ListPolicy asks for each snapshot with its circuit's policy (protocol 3
// leaves it out otherwise).
func ListPolicy() ListOption {
	return func(p *listPaging) { p.policy = true }
}

func listPagingOf(opts []ListOption) (listPaging, error) {
	var p listPaging
	for _, o := range opts {
		o(&p)
	}
	if p.limitSet && (p.limit < 1 || p.limit > MaxListLimit) {
		return p, &Error{Op: "list", Code: "bad_request",
			Message: fmt.Sprintf("limit must be from 1 to %d (got %d)", MaxListLimit, p.limit)}
	}
	return p, nil
}

// OpCount is one row of stats.ops.
type OpCount struct {
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
}

// Stats is stats' answer: the common counters typed, every member in Raw.
type Stats struct {
	UptimeMs    int64 `json:"uptime_ms"`
	StartedAt   int64 `json:"started_at"`
	Connections struct {
		Current int64 `json:"current"`
		Total   int64 `json:"total"`
	} `json:"connections"`
	Circuits    int64              `json:"circuits"`
	Slots       int64              `json:"slots"`
	Requests    int64              `json:"requests"`
	Transitions int64              `json:"transitions"`
	NoReply     int64              `json:"noreply"`
	Held        int64              `json:"held"`
	Waiters     int64              `json:"waiters"` // allows waiting for a ticket now (protocol 3)
	Ops         map[string]OpCount `json:"ops"`
	Errors      map[string]int64   `json:"errors"`
	Limits      map[string]int64   `json:"limits"`
	Raw         map[string]any     `json:"-"`
}

type snapshotReply struct {
	Snapshot Snapshot `json:"snapshot"`
}

func ctxMember(c Ctx) any {
	if len(c) == 0 {
		return nil
	}
	return map[string]any(c)
}

// Hello asks cbd who it is (client: a name logged at debug, may be "").
func (c *Client) Hello(ctx context.Context, client string) (*Hello, error) {
	var r Hello
	m := map[string]any{}
	if client != "" {
		m["client"] = client
	}
	if err := c.Request(ctx, "hello", m, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Get reads a circuit (an unknown name reads as its initial snapshot),
// its policy included.
func (c *Client) Get(ctx context.Context, name string, cctx Ctx) (*GetReply, error) {
	var r GetReply
	if err := c.Request(ctx, "get", map[string]any{"name": name, "ctx": ctxMember(cctx)}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Allow asks "may I call?" (§8 allow and record).
func (c *Client) Allow(ctx context.Context, name string, cctx Ctx) (*AllowReply, error) {
	return c.AllowWith(ctx, name, cctx, AllowOptions{})
}

// AllowWith is Allow with allow's optional members.
func (c *Client) AllowWith(ctx context.Context, name string, cctx Ctx, o AllowOptions) (*AllowReply, error) {
	var r AllowReply
	m := map[string]any{"name": name, "ctx": ctxMember(cctx)}
	if o.WaitMs > 0 {
		m["wait_ms"] = o.WaitMs
	}
	if o.Retry {
		m["retry"] = true
	}
	if err := c.Request(ctx, "allow", m, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (c *Client) outcomeOp(ctx context.Context, op string, m map[string]any, o RecordOptions) (*Snapshot, error) {
	m["ctx"] = ctxMember(o.Ctx)
	if o.DurationMs >= 0 {
		m["duration_ms"] = o.DurationMs
	}
	if o.NoReply {
		m["noreply"] = true
	}
	if o.Policy {
		m["policy"] = true
	}
	var r snapshotReply
	if err := c.Request(ctx, op, m, &r); err != nil {
		return nil, err
	}
	if o.NoReply {
		return nil, nil
	}
	return &r.Snapshot, nil
}

// Record reports a call's outcome, handing back o.Permit; the snapshot
// after it (nil with NoReply).
func (c *Client) Record(ctx context.Context, name string, outcome Outcome, o RecordOptions) (*Snapshot, error) {
	m := map[string]any{"name": name, "outcome": outcome.String()}
	if o.Permit != "" {
		m["permit"] = o.Permit
	}
	return c.outcomeOp(ctx, "record", m, o)
}

// RecordSuccess is record_success (o.Permit is not used).
func (c *Client) RecordSuccess(ctx context.Context, name string, o RecordOptions) (*Snapshot, error) {
	return c.outcomeOp(ctx, "record_success", map[string]any{"name": name}, o)
}

// RecordFailure is record_failure (o.Permit is not used).
func (c *Client) RecordFailure(ctx context.Context, name string, o RecordOptions) (*Snapshot, error) {
	return c.outcomeOp(ctx, "record_failure", map[string]any{"name": name}, o)
}

// Cas moves the circuit from one state to another if it is in from (§9).
func (c *Client) Cas(ctx context.Context, name, from, to string, cctx Ctx) (*CasReply, error) {
	var r CasReply
	m := map[string]any{"name": name, "from": from, "to": to, "ctx": ctxMember(cctx)}
	if err := c.Request(ctx, "cas", m, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// SetState forces a state, held with o.Hold (admin, §9).
func (c *Client) SetState(ctx context.Context, name, state string, o SetStateOptions) (*Snapshot, error) {
	m := map[string]any{"name": name, "state": state, "ctx": ctxMember(o.Ctx)}
	if o.Hold {
		m["hold"] = true
	}
	if o.TTLMs != 0 {
		m["ttl_ms"] = o.TTLMs
	}
	if o.Reason != "" {
		m["reason"] = o.Reason
	}
	if o.Policy {
		m["policy"] = true
	}
	var r snapshotReply
	if err := c.Request(ctx, "set_state", m, &r); err != nil {
		return nil, err
	}
	return &r.Snapshot, nil
}

// Release ends a hold (admin, §9).
func (c *Client) Release(ctx context.Context, name string, cctx Ctx) (*ReleaseReply, error) {
	var r ReleaseReply
	if err := c.Request(ctx, "release", map[string]any{"name": name, "ctx": ctxMember(cctx)}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// AcquireSlot takes a trial slot (§8 slots).
func (c *Client) AcquireSlot(ctx context.Context, name string, cctx Ctx) (*Slot, error) {
	var r Slot
	if err := c.Request(ctx, "acquire_slot", map[string]any{"name": name, "ctx": ctxMember(cctx)}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ReleaseSlot gives a slot back; whether a live slot was released.
func (c *Client) ReleaseSlot(ctx context.Context, name, token string, cctx Ctx) (bool, error) {
	var r struct {
		Released bool `json:"released"`
	}
	m := map[string]any{"name": name, "token": token, "ctx": ctxMember(cctx)}
	if err := c.Request(ctx, "release_slot", m, &r); err != nil {
		return false, err
	}
	return r.Released, nil
}

// Delete drops a circuit (admin); whether it existed.
func (c *Client) Delete(ctx context.Context, name string) (bool, error) {
	var r struct {
		Existed bool `json:"existed"`
	}
	if err := c.Request(ctx, "delete", map[string]any{"name": name}, &r); err != nil {
		return false, err
	}
	return r.Existed, nil
}

// List is one page of the stored circuits, only those in state unless it
// is "". Without options it is cbd's whole reply: every circuit that fits
// cbd's output bound (Truncated when some did not). ListLimit(n) caps the
// page; ListCursor(r.Cursor) reads the next page, over the connection the
// cursor came from (should it be lost meanwhile: ErrListingLost). A
// Client runs one listing at a time: a List without a cursor, here or in
// another goroutine, ends the listing before it (its cursor becomes
// cbd's bad_request). ListAll and ListEach follow the cursor for you.
func (c *Client) List(ctx context.Context, state string, cctx Ctx, opts ...ListOption) (*ListReply, error) {
	paging, err := listPagingOf(opts)
	if err != nil {
		return nil, err
	}
	c.listMu.Lock()
	defer c.listMu.Unlock()
	var onConn uint64
	if paging.cursor != "" && paging.cursor == c.listCursor {
		onConn = c.listConn
	}
	return c.listPage(ctx, onConn, state, cctx, paging)
}

// listPage sends one list request (listMu held) on connection onConn (0:
// any) and remembers the cursor of its reply.
func (c *Client) listPage(ctx context.Context, onConn uint64, state string, cctx Ctx, paging listPaging) (*ListReply, error) {
	var r ListReply
	m := map[string]any{"ctx": ctxMember(cctx)}
	if state != "" {
		m["state"] = state
	}
	if paging.limitSet {
		m["limit"] = paging.limit
	}
	if paging.cursor != "" {
		m["cursor"] = paging.cursor
	}
	if paging.policy {
		m["policy"] = true
	}
	used, err := c.requestOn(ctx, onConn, "list", m, &r)
	// A list request ends the connection's listing whatever its answer.
	c.listCursor, c.listConn = "", 0
	if err != nil {
		return nil, err
	}
	if r.Cursor != "" {
		c.listCursor, c.listConn = r.Cursor, used
	}
	return &r, nil
}

// ListEach calls fn with every stored circuit (only those in state unless
// it is ""), page after page over one connection, following the cursor;
// ListLimit(n) sets the page size (default: as many as fit cbd's output
// bound). Every circuit stored for the whole listing comes exactly once;
// one created meanwhile at most once; one deleted meanwhile not after its
// deletion. fn's error stops the listing and is returned. Should the
// connection be lost between pages, ListEach fails with ErrListingLost
// rather than start again. The Client's other lists wait until ListEach
// returns (fn must not list on the same Client; other ops are fine).
func (c *Client) ListEach(ctx context.Context, state string, cctx Ctx, fn func(Snapshot) error, opts ...ListOption) error {
	paging, err := listPagingOf(opts)
	if err != nil {
		return err
	}
	if paging.cursor != "" {
		return &Error{Op: "list", Code: "bad_request",
			Message: "ListEach and ListAll read a listing from its start: continue one with List and ListCursor"}
	}
	c.listMu.Lock()
	defer c.listMu.Unlock()
	var onConn uint64
	for {
		r, err := c.listPage(ctx, onConn, state, cctx, paging)
		if err != nil {
			return err
		}
		for _, snap := range r.Circuits {
			if err := fn(snap); err != nil {
				return err
			}
		}
		if r.Cursor == "" {
			if r.Truncated {
				return &Error{Op: "list", Code: CodeUnavailable,
					Message: "cbd cut the list without a cursor to go on with (a cbd without list pages)"}
			}
			return nil
		}
		paging.cursor, onConn = r.Cursor, c.listConn
	}
}

// ListAll is every stored circuit (only those in state unless it is ""),
// read by ListEach: pages followed over one connection, never cut.
func (c *Client) ListAll(ctx context.Context, state string, cctx Ctx, opts ...ListOption) ([]Snapshot, error) {
	var all []Snapshot
	err := c.ListEach(ctx, state, cctx, func(s Snapshot) error {
		all = append(all, s)
		return nil
	}, opts...)
	if err != nil {
		return nil, err
	}
	return all, nil
}

// Stats is cbd's counters.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	var raw json.RawMessage
	if err := c.Request(ctx, "stats", nil, &raw); err != nil {
		return nil, err
	}
	var s Stats
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, &Error{Op: "stats", Code: CodeUnavailable, Message: err.Error()}
	}
	_ = json.Unmarshal(raw, &s.Raw)
	return &s, nil
}

// Metrics is the Prometheus text (§8 metrics).
func (c *Client) Metrics(ctx context.Context) (string, error) {
	var r struct {
		Text string `json:"text"`
	}
	if err := c.Request(ctx, "metrics", nil, &r); err != nil {
		return "", err
	}
	return r.Text, nil
}
