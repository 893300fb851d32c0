// SPDX-License-Identifier: Apache-2.0

// main_test.go — the example service against a real cbd and its flaky
// upstream: answers while the upstream is up, the fallback once the
// circuit opened (the breaker is cached: polled, bounded).
package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"cbd.example/cbdclient"
	"cbd.example/cbdclient/internal/cbdtest"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestService(t *testing.T) {
	d := cbdtest.StartT(t, "[circuit \"example\"]\nfailure_threshold = 3\nbreak_ms = 60000\n")
	up := httptest.NewServer(FlakyUpstream())
	defer up.Close()
	c := cbdclient.NewClient(cbdclient.Options{Socket: d.Socket})
	defer c.Close()
	svc, err := NewService(up.URL+"/", "example", c)
	if err != nil {
		t.Fatal(err)
	}
	svc.Retry.Base, svc.Retry.Max = time.Millisecond, time.Millisecond
	srv := httptest.NewServer(svc)
	defer srv.Close()
	if code, body := get(t, srv.URL); code != 200 || !strings.Contains(body, "upstream says hello") {
		t.Fatalf("up: %d %q", code, body)
	}
	get(t, up.URL+"/toggle")
	// Three failed attempts open the circuit (failure_threshold 3).
	if code, body := get(t, srv.URL); code != http.StatusBadGateway {
		t.Fatalf("down: %d %q", code, body)
	}
	// The breaker is cached: it refuses once the trip's event reached its
	// watch connection (one event delivery), so poll, bounded.
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, srv.URL)
		if code == http.StatusServiceUnavailable && strings.HasPrefix(body, "fallback:") {
			break
		}
		if code != http.StatusBadGateway || time.Now().After(deadline) {
			t.Fatalf("open: %d %q", code, body)
		}
		time.Sleep(time.Millisecond)
	}
}
