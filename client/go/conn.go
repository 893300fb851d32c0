// SPDX-License-Identifier: Apache-2.0

// conn.go — one connection to cbd, safe for goroutines: the socket path
// (argument, else $CBD_SOCKET, else /run/cbd/cbd.sock), connect and I/O
// timeouts, reconnection, one mutex for the connection, and the request /
// reply framing of PROTOCOL.md §2-§4.
//
// A request is one JSON line; its reply is the next line that carries
// "ok" (watch events, which never do, are skipped). A connection that timed
// out or broke is closed at once, so a late reply can never be taken for
// the answer to a later request; the next call reconnects.

package cbdclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults and limits of a connection (libcbclient's
// CBC_DEFAULT_CONNECT_TIMEOUT_MS and CBC_DEFAULT_IO_TIMEOUT_MS: 100 ms).
const (
	DefaultSocket         = "/run/cbd/cbd.sock"
	DefaultConnectTimeout = 100 * time.Millisecond
	DefaultIOTimeout      = 100 * time.Millisecond
	// MaxReplyBytes is the longest reply line accepted (list replies may be
	// large: cbd cuts them at half of max_output_bytes, 8 MiB by default).
	MaxReplyBytes = 64 << 20
	readBufBytes  = 65536
)

// noreplyRefused are the ops on which cbd ignores noreply (§8).
var noreplyRefused = map[string]bool{"hello": true, "watch": true, "unwatch": true,
	"list": true, "stats": true}

// ResolveSocket is path, else $CBD_SOCKET, else DefaultSocket.
func ResolveSocket(path string) string {
	if path != "" {
		return path
	}
	if env := os.Getenv("CBD_SOCKET"); env != "" {
		return env
	}
	return DefaultSocket
}

// Options configure a Client; zero values take the defaults.
type Options struct {
	Socket         string
	ConnectTimeout time.Duration
	IOTimeout      time.Duration
	MaxReplyBytes  int // the longest reply line accepted (0: MaxReplyBytes)
}

// Counters count what a Client met; every limit hit is one of them.
type Counters struct {
	Requests        int64 // requests sent
	Connects        int64 // connections made (the first one and reconnections)
	Timeouts        int64 // connects or replies past their timeout
	Unavailable     int64 // other failures to reach cbd
	RepliesTooLong  int64 // replies past MaxReplyBytes
	PolicyConflicts int64 // replies carrying policy_conflict (§6)
}

// Client is a connection to cbd shared by goroutines (one request at a
// time on the wire, under a mutex). Every op of §8 is a method.
type Client struct {
	Socket         string
	ConnectTimeout time.Duration
	IOTimeout      time.Duration
	MaxReplyBytes  int

	counters Counters
	mu       sync.Mutex
	conn     net.Conn
	rd       *bufio.Reader
	connID   uint64 // numbers the connections made, conn's number (0: none)
	lastConn uint64 // the number of the last connection made

	// One listing at a time (a cursor is the connection's, until its next
	// list): every list request holds listMu, ListEach across its pages.
	// listCursor is the cursor cbd gave last, on connection listConn.
	listMu     sync.Mutex
	listCursor string
	listConn   uint64

	// The process's watch cache for Socket while cached breakers use
	// this client (cache.go); Close gives it back.
	cacheMu sync.Mutex
	cache   atomic.Pointer[watchCache]
}

// NewClient is a client on opts.Socket (else $CBD_SOCKET, else
// /run/cbd/cbd.sock); it connects on first use.
func NewClient(opts Options) *Client {
	c := &Client{Socket: ResolveSocket(opts.Socket), ConnectTimeout: opts.ConnectTimeout,
		IOTimeout: opts.IOTimeout, MaxReplyBytes: opts.MaxReplyBytes}
	if c.MaxReplyBytes <= 0 {
		c.MaxReplyBytes = MaxReplyBytes
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.IOTimeout <= 0 {
		c.IOTimeout = DefaultIOTimeout
	}
	return c
}

// Counters is a copy of the client's counters.
func (c *Client) Counters() Counters {
	return Counters{Requests: atomic.LoadInt64(&c.counters.Requests),
		Connects:        atomic.LoadInt64(&c.counters.Connects),
		Timeouts:        atomic.LoadInt64(&c.counters.Timeouts),
		Unavailable:     atomic.LoadInt64(&c.counters.Unavailable),
		RepliesTooLong:  atomic.LoadInt64(&c.counters.RepliesTooLong),
		PolicyConflicts: atomic.LoadInt64(&c.counters.PolicyConflicts)}
}

// Close drops the connection (the next request reconnects) and this
// client's share of the watch connection of cached breakers: the last
// share writes the outcomes still queued (what the socket does not take
// at once goes on as cbd reads it, waited for 200 ms at most) and closes
// it. Breakers on the client keep working (the next cached call
// watches again).
func (c *Client) Close() error {
	c.cacheMu.Lock()
	cache := c.cache.Swap(nil)
	c.cacheMu.Unlock()
	if cache != nil {
		releaseWatchCache(cache)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop()
	return nil
}

// watchCache is the process's watch cache for the client's socket,
// taken on first use.
func (c *Client) watchCache() *watchCache {
	if w := c.cache.Load(); w != nil {
		return w
	}
	c.cacheMu.Lock()
	defer c.cacheMu.Unlock()
	w := c.cache.Load()
	if w == nil {
		w = acquireWatchCache(c.Socket)
		c.cache.Store(w)
	}
	return w
}

// CacheCounters are the counters of the process's watch cache for the
// client's socket (shared by every client on it; zero when no cached
// breaker runs).
func (c *Client) CacheCounters() CacheCounters { return watchCacheCounters(c.Socket) }

func (c *Client) drop() {
	if c.conn != nil {
		c.conn.Close()
	}
	c.conn, c.rd, c.connID = nil, nil, 0
}

// stale says whether cbd closed the idle connection (say, it restarted).
func (c *Client) stale() bool {
	_ = c.conn.SetReadDeadline(time.Now())
	_, err := c.rd.Peek(1)
	if err == nil {
		return false // unread event lines: skipped as replies are read
	}
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func (c *Client) connect(ctx context.Context) error {
	d := net.Dialer{Timeout: c.ConnectTimeout}
	conn, err := d.DialContext(ctx, "unix", c.Socket)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return &Error{Code: CodeTimeout, Message: "connecting to " + c.Socket + " timed out"}
		}
		return &Error{Code: CodeUnavailable, Message: fmt.Sprintf("cannot connect to %s: %v", c.Socket, err)}
	}
	atomic.AddInt64(&c.counters.Connects, 1)
	c.lastConn++
	c.conn, c.rd, c.connID = conn, bufio.NewReaderSize(conn, readBufBytes), c.lastConn
	return nil
}

func (c *Client) readLine() ([]byte, error) {
	var line []byte
	for {
		part, more, err := c.rd.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, part...)
		if len(line) > c.MaxReplyBytes {
			atomic.AddInt64(&c.counters.RepliesTooLong, 1)
			return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("reply longer than %d bytes", c.MaxReplyBytes)}
		}
		if !more {
			return line, nil
		}
	}
}

// envelope is what every reply carries (§3).
type envelope struct {
	Ok             *bool           `json:"ok"`
	PolicyConflict json.RawMessage `json:"policy_conflict"`
	Error          *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Request sends one request (members set to nil are left out) and decodes
// its reply into out (may be nil). With noreply true (outcome ops), it
// returns once the line is written. ctx bounds the wait besides IOTimeout.
func (c *Client) Request(ctx context.Context, op string, members map[string]any, out any) error {
	_, err := c.requestOn(ctx, 0, op, members, out)
	return err
}

// requestOn is Request on connection number onConn (0: the current one,
// or a new one): when that connection is gone it fails with
// ErrListingLost instead of reconnecting. It returns the number of the
// connection the request went over.
func (c *Client) requestOn(ctx context.Context, onConn uint64, op string, members map[string]any, out any) (uint64, error) {
	req := map[string]any{"op": op}
	for k, v := range members {
		if v != nil {
			req[k] = v
		}
	}
	line, err := json.Marshal(req)
	if err != nil {
		return 0, &Error{Op: op, Code: "bad_request", Message: err.Error()}
	}
	line = append(line, '\n')
	noreply := members["noreply"] == true && !noreplyRefused[op]
	if ctx == nil {
		ctx = context.Background()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	atomic.AddInt64(&c.counters.Requests, 1)
	raw, err := c.exchange(ctx, onConn, op, line, noreply)
	used := c.connID
	if errors.Is(err, ErrListingLost) {
		return 0, err // nothing went over the connection there is now
	}
	if err != nil {
		c.drop()
		if cerr := ctx.Err(); cerr != nil {
			return 0, cerr // the caller's cancel or deadline, not cbd's fault
		}
		var e *Error
		if errors.As(err, &e) && e.Code == CodeTimeout {
			atomic.AddInt64(&c.counters.Timeouts, 1)
		} else {
			atomic.AddInt64(&c.counters.Unavailable, 1)
		}
		return 0, err
	}
	if noreply {
		return used, nil
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		c.drop()
		return 0, &Error{Op: op, Code: CodeUnavailable, Message: "cbd sent a line that is not JSON: " + err.Error()}
	}
	if len(env.PolicyConflict) > 0 && string(env.PolicyConflict) != "null" {
		atomic.AddInt64(&c.counters.PolicyConflicts, 1)
	}
	if !*env.Ok {
		e := &Error{Op: op, Code: "unknown"}
		if env.Error != nil {
			e.Code, e.Message = env.Error.Code, env.Error.Message
		}
		return used, e
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return used, &Error{Op: op, Code: CodeUnavailable, Message: "unexpected reply: " + err.Error()}
		}
	}
	return used, nil
}

func (c *Client) exchange(ctx context.Context, onConn uint64, op string, line []byte, noreply bool) ([]byte, error) {
	if c.conn != nil && c.stale() {
		c.drop()
	}
	if onConn != 0 && c.connID != onConn {
		return nil, &Error{Op: op, Code: CodeUnavailable, cause: ErrListingLost,
			Message: "the connection the listing went over was lost, and its cursor with it: list again from the start"}
	}
	if c.conn == nil {
		if err := c.connect(ctx); err != nil {
			err.(*Error).Op = op
			return nil, err
		}
	}
	deadline := time.Now().Add(c.IOTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.conn.SetDeadline(deadline)
	fail := func(err error) ([]byte, error) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, &Error{Op: op, Code: CodeTimeout,
				Message: fmt.Sprintf("cbd did not answer %s within %d ms", op, c.IOTimeout.Milliseconds())}
		}
		var e *Error
		if errors.As(err, &e) {
			e.Op = op
			return nil, e
		}
		return nil, &Error{Op: op, Code: CodeUnavailable, Message: "connection to cbd failed: " + err.Error()}
	}
	if _, err := c.conn.Write(line); err != nil {
		return fail(err)
	}
	if noreply {
		return nil, nil
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, &Error{Op: op, Code: CodeTimeout, Message: err.Error()}
		}
		raw, err := c.readLine()
		if err != nil {
			return fail(err)
		}
		// Event lines never carry "ok" (§8 watch): skip them.
		if len(bytes.TrimSpace(raw)) == 0 || !bytes.Contains(raw, []byte(`"ok"`)) {
			continue
		}
		var env envelope
		if json.Unmarshal(raw, &env) == nil && env.Ok == nil {
			continue
		}
		return raw, nil
	}
}
