// SPDX-License-Identifier: Apache-2.0

// main_test.go — one cbd shared by the tests that only use their own
// circuit names (started on first use, stopped after every test ran), and
// the helpers every test file uses.

package cbdclient

import (
	"fmt"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cbd.example/cbdclient/internal/cbdtest"
)

var (
	sharedOnce sync.Once
	shared     *cbdtest.Daemon
	sharedErr  error
	nameSeq    int64
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(runWorker(os.Getenv(workerEnv))) // a process of a multi-process test
	}
	code := m.Run()
	// Every test closed the clients of its cached breakers: no watch
	// goroutine may outlive them.
	cacheRegistry.mu.Lock()
	for socket := range cacheRegistry.bySocket {
		fmt.Fprintf(os.Stderr, "FAIL: a watch cache for %s still runs\n", socket)
		code = 1
	}
	cacheRegistry.mu.Unlock()
	if shared != nil {
		shared.Cleanup()
	}
	os.Exit(code)
}

// sharedCbd is the shared daemon (the test is skipped without a binary).
func sharedCbd(t *testing.T) *cbdtest.Daemon {
	t.Helper()
	if cbdtest.Binary() == "" {
		t.Skip("CBD_BINARY is not set")
	}
	sharedOnce.Do(func() { shared, sharedErr = startShared() })
	if sharedErr != nil {
		t.Fatalf("starting cbd: %v", sharedErr)
	}
	return shared
}

func startShared() (*cbdtest.Daemon, error) {
	if cbdtest.Binary() == "" {
		return nil, nil
	}
	return cbdtest.Start("")
}

// testClient is a client of the shared cbd with generous timeouts (a
// loaded CI machine), closed at the end of the test.
func testClient(t *testing.T) *Client {
	d := sharedCbd(t)
	c := NewClient(Options{Socket: d.Socket, ConnectTimeout: 2 * time.Second, IOTimeout: 2 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

var badName = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// circuitName is a circuit name no other test uses.
func circuitName(t *testing.T) string {
	return fmt.Sprintf("go-%s-%d", badName.ReplaceAllString(t.Name(), "_"), atomic.AddInt64(&nameSeq, 1))
}
