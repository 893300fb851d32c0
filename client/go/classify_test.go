// SPDX-License-Identifier: Apache-2.0

// classify_test.go — the outcome classifiers (default, HTTP status,
// net.Error timeouts) and the http.RoundTripper against a loopback HTTP
// server and a real cbd: a failing host's circuit opens and refuses
// without reaching the network; per-host circuits leave other hosts alone.

package cbdclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

var _ net.Error = timeoutErr{}

func TestHTTPOutcome(t *testing.T) {
	for status, want := range map[int]Outcome{200: Success, 204: Success, 301: Success,
		400: Success, 404: Success, 408: Failure, 429: Failure, 500: Failure, 503: Failure, 99: Failure} {
		if got := HTTPOutcome(status); got != want {
			t.Errorf("HTTPOutcome(%d) = %v, want %v", status, got, want)
		}
		if got := ClassifyHTTP(&http.Response{StatusCode: status}, nil); got != want {
			t.Errorf("ClassifyHTTP(%d) = %v, want %v", status, got, want)
		}
		if got := ClassifyHTTPError(fmt.Errorf("wrapped: %w", &HTTPStatusError{status})); got != want {
			t.Errorf("ClassifyHTTPError(%d) = %v, want %v", status, got, want)
		}
	}
	cases := []struct {
		err  error
		want Outcome
	}{
		{nil, Success},
		{timeoutErr{}, Failure},
		{&net.OpError{Op: "dial", Err: timeoutErr{}}, Failure},
		{context.Canceled, Ignore},
		{fmt.Errorf("x: %w", context.Canceled), Ignore},
		{context.DeadlineExceeded, Failure},
		{errors.New("connection refused"), Failure},
	}
	for _, c := range cases {
		if got := ClassifyHTTPError(c.err); got != c.want {
			t.Errorf("ClassifyHTTPError(%v) = %v, want %v", c.err, got, c.want)
		}
		if got := ClassifyHTTP(nil, c.err); c.err != nil && got != c.want {
			t.Errorf("ClassifyHTTP(nil, %v) = %v, want %v", c.err, got, c.want)
		}
	}
	if DefaultClassify(nil) != Success || DefaultClassify(errBoom) != Failure ||
		DefaultClassify(context.Canceled) != Ignore {
		t.Fatal("DefaultClassify")
	}
	if Success.String() != "success" || Failure.String() != "failure" || Ignore.String() != "ignore" {
		t.Fatal("outcome names")
	}
}

func TestTransportProtectsAClient(t *testing.T) {
	var hits int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt64(&hits, 1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	// Uncached: the request right after the trip is refused (cached, it
	// would be once the trip's event arrived).
	b := newTestBreaker(t, BreakerOptions{Policy: Ctx{"failure_threshold": 2, "break_ms": 60000},
		Cache: CacheOff})
	hc := &http.Client{Transport: NewTransport(nil, b), Timeout: 10 * time.Second}
	for i := 0; i < 2; i++ {
		resp, err := hc.Get(srv.URL)
		if err != nil || resp.StatusCode != 503 {
			t.Fatalf("request %d: %v", i, err)
		}
		resp.Body.Close()
	}
	_, err := hc.Get(srv.URL)
	var open *CircuitOpenError
	if !errors.Is(err, ErrCircuitOpen) || !errors.As(err, &open) || open.RetryAfter <= 0 {
		t.Fatalf("third request: %v", err)
	}
	if atomic.LoadInt64(&hits) != 2 {
		t.Fatalf("the server saw %d requests, want 2", hits)
	}
}

func TestTransportPerHost(t *testing.T) {
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer bad.Close()
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
	}))
	defer good.Close()
	c := testClient(t)
	prefix := circuitName(t) + "-"
	tr := NewPerHostTransport(nil, prefix, BreakerOptions{Client: c, Cache: CacheOff,
		Policy: Ctx{"failure_threshold": 1, "break_ms": 60000}})
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := hc.Get(bad.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, err := hc.Get(bad.URL); !errors.Is(err, ErrCircuitOpen) {
		t.Fatalf("bad host after a 500: %v", err)
	}
	resp, err = hc.Get(good.URL)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("good host: %v", err)
	}
	resp.Body.Close()
	host := bad.Listener.Addr().String()
	g, err := c.Get(context.Background(), prefix+host, nil)
	if err != nil || g.Snapshot.State != StateOpen {
		t.Fatalf("circuit %s: %+v %v", prefix+host, g, err)
	}
}
