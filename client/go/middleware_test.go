// SPDX-License-Identifier: Apache-2.0

// middleware_test.go — the HTTP integrations against real local servers:
// the cached Transport trips on 5xx and refuses without reaching the
// server, and Middleware answers 503 with Retry-After (retry_after_ms
// rounded up to seconds) while a named circuit is open, without calling
// the handler.

package cbdclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestCachedTransportTripsOn5xx(t *testing.T) {
	var hits int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt64(&hits, 1)
		w.WriteHeader(http.StatusBadGateway)
	}))
	defer srv.Close()
	b := cachedBreaker(t, sharedCbd(t).Socket, circuitName(t), BreakerOptions{Policy: Ctx{"failure_threshold": 2, "break_ms": 60000}})
	hc := &http.Client{Transport: NewTransport(nil, b), Timeout: 10 * time.Second}
	for i := 0; i < 5; i++ {
		resp, err := hc.Get(srv.URL)
		if err == nil {
			resp.Body.Close()
		} else if !errors.Is(err, ErrCircuitOpen) {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if n := atomic.LoadInt64(&hits); n != 2 {
		t.Fatalf("the server saw %d requests, want 2 (threshold 2, cached)", n)
	}
}

func TestMiddlewareAnswers503WithRetryAfter(t *testing.T) {
	for _, mode := range []CacheMode{CacheOn, CacheOff} {
		b := newTestBreaker(t, BreakerOptions{Policy: Ctx{"break_ms": 60000}, Cache: mode})
		var served int64
		srv := httptest.NewServer(Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			atomic.AddInt64(&served, 1)
			_, _ = io.WriteString(w, "hello")
		}), b))
		get := func() (*http.Response, string) {
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp, string(body)
		}
		ctx := context.Background()
		if err := b.Execute(ctx, succeeding); err != nil { // creates the circuit
			t.Fatal(err)
		}
		if resp, body := get(); resp.StatusCode != 200 || body != "hello" {
			t.Fatalf("closed: %d %q", resp.StatusCode, body)
		}
		if err := b.Force(ctx, StateOpen); err != nil {
			t.Fatal(err)
		}
		if mode == CacheOn {
			waitFor(t, "the cache to see it open", func() bool { return cachedState(b) == StateOpen })
		}
		resp, body := get()
		g, err := b.Client().Get(ctx, b.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := strconv.FormatInt(RetryAfterSeconds(time.Duration(g.Snapshot.RetryAfterMs)*time.Millisecond), 10)
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != want || atomic.LoadInt64(&served) != 1 {
			t.Fatalf("mode %v open: %d Retry-After %q (want %s), %q, handler ran %d times", mode,
				resp.StatusCode, resp.Header.Get("Retry-After"), want, body, served)
		}
		srv.Close()
	}
	if RetryAfterSeconds(1500*time.Millisecond) != 2 || RetryAfterSeconds(0) != 1 || RetryAfterSeconds(2*time.Second) != 2 {
		t.Fatal("RetryAfterSeconds rounds up, at least 1")
	}
}
