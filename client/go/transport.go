// SPDX-License-Identifier: Apache-2.0

// transport.go — an http.RoundTripper that protects every request of an
// http.Client with a breaker: one circuit for the client, or one per host
// (PerHost: the circuit is Prefix + the request's host). A refused request
// fails with a *CircuitOpenError (errors.Is(err, ErrCircuitOpen)) without
// reaching the network; every other request's outcome is classified by
// ClassifyHTTP (5xx, 408, 429, transport errors and timeouts are failures)
// and reported with its duration (until the response headers arrived).

package cbdclient

import (
	"net/http"
	"sync"
	"time"
)

// Transport is the breaker's http.RoundTripper.
type Transport struct {
	// Base does the requests (default http.DefaultTransport).
	Base http.RoundTripper
	// Breaker protects every request (when PerHost is false).
	Breaker *Breaker
	// PerHost: one breaker per host, named Prefix + host, made with
	// Options (Options.Client shared: one connection to cbd).
	PerHost bool
	Prefix  string
	Options BreakerOptions
	// Classify maps an exchange to its outcome (default ClassifyHTTP).
	Classify func(*http.Response, error) Outcome

	mu       sync.Mutex
	breakers map[string]*Breaker
}

// NewTransport protects base (nil: http.DefaultTransport) with b.
func NewTransport(base http.RoundTripper, b *Breaker) *Transport {
	return &Transport{Base: base, Breaker: b}
}

// NewPerHostTransport protects base with one breaker per host, named
// prefix + host.
func NewPerHostTransport(base http.RoundTripper, prefix string, opts BreakerOptions) *Transport {
	if opts.Client == nil {
		opts.Client = NewClient(Options{Socket: opts.Socket})
	}
	return &Transport{Base: base, PerHost: true, Prefix: prefix, Options: opts}
}

// BreakerFor is the breaker protecting requests to host.
func (t *Transport) BreakerFor(host string) (*Breaker, error) {
	if !t.PerHost {
		return t.Breaker, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if b := t.breakers[host]; b != nil {
		return b, nil
	}
	b, err := NewBreaker(t.Prefix+host, t.Options)
	if err != nil {
		return nil, err
	}
	if t.breakers == nil {
		t.breakers = map[string]*Breaker{}
	}
	t.breakers[host] = b
	return b, nil
}

// RoundTrip runs one request if its circuit permits.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	b, err := t.BreakerFor(req.URL.Host)
	if err != nil {
		return nil, err
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	permit, err := b.Acquire(req.Context())
	if err != nil {
		return nil, err
	}
	started := time.Now()
	done := false
	defer func() {
		if !done {
			_ = b.Report(permit, Ignore, time.Since(started))
		}
	}()
	resp, err := base.RoundTrip(req)
	done = true
	classify := t.Classify
	if classify == nil {
		classify = ClassifyHTTP
	}
	_ = b.Report(permit, classifyExchange(classify, resp, err), time.Since(started))
	return resp, err
}

func classifyExchange(f func(*http.Response, error) Outcome, resp *http.Response, err error) (o Outcome) {
	defer func() {
		if recover() != nil {
			o = Failure
		}
	}()
	return f(resp, err)
}
