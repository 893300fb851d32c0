// SPDX-License-Identifier: Apache-2.0

// middleware.go — net/http server middleware beside the RoundTripper
// (transport.go): a handler that answers 503 Service Unavailable, with
// Retry-After in whole seconds (retry_after_ms rounded up), while one of
// the named circuits refuses calls (open, held open), and passes every
// other request on. It takes no permit and reports no outcome: the calls
// the handler makes to the dependency are protected by their own breaker
// (Execute, Transport). Breaker.Check is the test it makes.

package cbdclient

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Check says whether a call now would be refused, without taking a permit
// or reporting anything: a *CircuitOpenError (open with its break not
// elapsed, or held open), else nil. Cached, the watch cache answers; else
// cbd (get). While cbd is unavailable the breaker's fallback copy answers
// (StoreLocal), or nothing is refused.
func (b *Breaker) Check(ctx context.Context) error {
	if u := b.cacheUse.Load(); b.cached && u != nil && u.entry != nil {
		// Copies: a check does not mark events or snapshots as seen.
		seen, read := atomic.LoadUint64(&b.cacheSeen), atomic.LoadUint64(&b.cacheRead)
		switch v, retryAfterMs, _, _ := u.cache.decide(u.entry, &seen, &read, b.told.Load()); v {
		case cacheRefuse:
			return &CircuitOpenError{Name: b.Name, State: StateOpen,
				RetryAfter: time.Duration(retryAfterMs) * time.Millisecond}
		case cachePermit:
			return nil
		}
	}
	cctx, now := b.callCtx()
	r, err := b.client.Get(ctx, b.Name, cctx)
	if err != nil {
		if !Unavailable(err) {
			return err
		}
		b.mu.Lock()
		degraded := b.degraded
		b.mu.Unlock()
		if degraded && b.opts.StorePolicy == StoreLocal {
			if s := b.local.Get(b.Name, b.fallbackPolicy(), now); s.State == StateOpen && s.RetryAfterMs > 0 {
				return &CircuitOpenError{Name: b.Name, State: StateOpen,
					RetryAfter: time.Duration(s.RetryAfterMs) * time.Millisecond}
			}
		}
		return nil
	}
	s := &r.Snapshot
	held := s.Hold != nil && s.Hold.State == StateOpen
	if held || (s.State == StateOpen && s.RetryAfterMs > 0) {
		ms := s.RetryAfterMs
		if ms < 1 {
			ms = 1
		}
		return &CircuitOpenError{Name: b.Name, State: StateOpen, RetryAfter: time.Duration(ms) * time.Millisecond}
	}
	return nil
}

// RetryAfterSeconds is a refusal's Retry-After value: its retry_after_ms
// in whole seconds, rounded up (at least 1).
func RetryAfterSeconds(retryAfter time.Duration) int64 {
	s := (retryAfter.Milliseconds() + 999) / 1000
	if s < 1 {
		s = 1
	}
	return s
}

// Middleware answers 503 with Retry-After while any of breakers refuses
// (Breaker.Check), else passes the request to next. A check that fails
// for another reason (cbd refused the request) lets the request through.
func Middleware(next http.Handler, breakers ...*Breaker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for _, b := range breakers {
			var open *CircuitOpenError
			if err := b.Check(r.Context()); errors.As(err, &open) {
				w.Header().Set("Retry-After", strconv.FormatInt(RetryAfterSeconds(open.RetryAfter), 10))
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte("circuit " + strconv.Quote(b.Name) + " is open: retry in " +
					strconv.FormatInt(open.RetryAfter.Milliseconds(), 10) + " ms\n"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
