// SPDX-License-Identifier: Apache-2.0

// Command service is an example service protecting its upstream with cbd.
//
// A small HTTP server whose every request calls an upstream through a cbd
// breaker named "upstream", with retries (exponential backoff, full
// jitter, a 500 ms per-attempt timeout) and a fallback answer while the
// circuit is open. With -demo it also runs a flaky upstream on loopback
// that fails every request while it is "down" (toggle with GET /toggle on
// the upstream).
//
//	cbd -s /tmp/cbd.sock &
//	CBD_SOCKET=/tmp/cbd.sock go run ./examples/service -demo
//	curl localhost:8080/          # "upstream says hello" or the fallback
//	curl localhost:8081/toggle    # take the demo upstream down / up
//	cbctl -s /tmp/cbd.sock get upstream
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"sync/atomic"
	"time"

	"cbd.example/cbdclient"
)

// Service answers with its upstream's body, or a fallback while the
// upstream's circuit is open.
type Service struct {
	Upstream string
	Retry    *cbdclient.Retry
	HTTP     *http.Client
}

// NewService protects calls to upstream with a breaker on circuit name.
func NewService(upstream, name string, client *cbdclient.Client) (*Service, error) {
	b, err := cbdclient.NewBreaker(name, cbdclient.BreakerOptions{
		Client:   client,
		Classify: cbdclient.ClassifyHTTPError, // 5xx, 408, 429, timeouts: failures
		OnStateChange: func(name, from, to string) {
			log.Printf("circuit %s: %s -> %s", name, from, to)
		},
	})
	if err != nil {
		return nil, err
	}
	r := &cbdclient.Retry{Breaker: b, Attempts: 3, Base: 50 * time.Millisecond,
		Max: time.Second, AttemptTimeout: 500 * time.Millisecond,
		Fallback: func(ctx context.Context, err error) error { return err }}
	return &Service{Upstream: upstream, Retry: r, HTTP: &http.Client{}}, nil
}

func (s *Service) fetch(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.Upstream, nil)
	if err != nil {
		return "", err
	}
	resp, err := s.HTTP.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if cbdclient.HTTPOutcome(resp.StatusCode) == cbdclient.Failure {
		return "", &cbdclient.HTTPStatusError{StatusCode: resp.StatusCode}
	}
	return string(body), nil
}

func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := cbdclient.Retrying(r.Context(), s.Retry, s.fetch)
	var open *cbdclient.CircuitOpenError
	switch {
	case errors.As(err, &open): // the fallback, the same in every language's example
		w.Header().Set("Retry-After", fmt.Sprint(int(open.RetryAfter.Seconds())+1))
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "fallback: upstream unavailable, retry in %d ms\n", open.RetryAfter.Milliseconds())
	case err != nil:
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprintf(w, "upstream failed: %v\n", err)
	default:
		fmt.Fprint(w, body)
	}
}

// FlakyUpstream answers "upstream says hello" while up, 503 while down;
// GET /toggle flips it.
func FlakyUpstream() http.Handler {
	var down atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/toggle", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "down: %v\n", !down.Load())
		down.Store(!down.Load())
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "upstream says hello")
	})
	return mux
}

func main() {
	listen := flag.String("listen", "127.0.0.1:8080", "address to serve on")
	upstream := flag.String("upstream", "http://127.0.0.1:8081/", "the upstream's URL")
	demo := flag.Bool("demo", false, "also run a flaky upstream on 127.0.0.1:8081")
	socket := flag.String("socket", "", "cbd's socket (default $CBD_SOCKET, else /run/cbd/cbd.sock)")
	flag.Parse()
	if *demo {
		go func() { log.Fatal(http.ListenAndServe("127.0.0.1:8081", FlakyUpstream())) }()
	}
	svc, err := NewService(*upstream, "upstream", cbdclient.NewClient(cbdclient.Options{Socket: *socket}))
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("serving on %s, upstream %s", *listen, *upstream)
	log.Fatal(http.ListenAndServe(*listen, svc))
}
