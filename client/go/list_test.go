// SPDX-License-Identifier: Apache-2.0

// list_test.go — list pages against a real cbd of the test's own (so the
// circuits listed are exactly the test's): ListLimit and ListCursor, the
// last page without a cursor, ListAll and ListEach following the cursor
// over one connection, a circuit deleted between pages, cursors that are
// not the connection's, limits out of range, a lost connection between
// pages, and a list past half of max_output_bytes.

package cbdclient

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"cbd.example/cbdclient/internal/cbdtest"
)

// ownClient is a client of d with generous timeouts, closed at the end.
func ownClient(t *testing.T, d *cbdtest.Daemon) *Client {
	c := NewClient(Options{Socket: d.Socket, ConnectTimeout: 2 * time.Second, IOTimeout: 2 * time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// createCircuits stores n circuits named prefix-0000... (noreply records,
// then one answered request: cbd has applied them all) and returns their
// names.
func createCircuits(t *testing.T, c *Client, prefix string, n int) map[string]bool {
	t.Helper()
	ctx := context.Background()
	names := map[string]bool{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%04d", prefix, i)
		names[name] = true
		if _, err := c.RecordSuccess(ctx, name, RecordOptions{DurationMs: -1, NoReply: true}); err != nil {
			t.Fatalf("creating %s: %v", name, err)
		}
	}
	st, err := c.Stats(ctx)
	if err != nil || st.Circuits != int64(n) {
		t.Fatalf("stats after creating %d circuits: %+v %v", n, st, err)
	}
	return names
}

// listRequests is how many list requests cbd answered.
func listRequests(t *testing.T, c *Client) int64 {
	t.Helper()
	st, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Ops["list"].Requests
}

// sameNames fails unless got holds every name of want exactly once.
func sameNames(t *testing.T, what string, got []Snapshot, want map[string]bool) {
	t.Helper()
	seen := map[string]bool{}
	for _, s := range got {
		if seen[s.Name] {
			t.Fatalf("%s: %s listed twice", what, s.Name)
		}
		if !want[s.Name] {
			t.Fatalf("%s: %s listed, not expected", what, s.Name)
		}
		seen[s.Name] = true
	}
	if len(seen) != len(want) {
		t.Fatalf("%s: %d circuits listed, %d expected", what, len(seen), len(want))
	}
}

func isBadRequest(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == "bad_request"
}

func TestListPages(t *testing.T) {
	d := cbdtest.StartT(t, "")
	c := ownClient(t, d)
	ctx := context.Background()
	names := createCircuits(t, c, "page", 750)

	// Pages of 300: 300, 300, 150; the last one without a cursor.
	var all []Snapshot
	var opts []ListOption
	for i, want := range []int{300, 300, 150} {
		r, err := c.List(ctx, "", nil, append(opts, ListLimit(300))...)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		last := i == 2
		if len(r.Circuits) != want || r.Truncated == last || (r.Cursor == "") != last {
			t.Fatalf("page %d: %d circuits (want %d), truncated %v, cursor %q",
				i, len(r.Circuits), want, r.Truncated, r.Cursor)
		}
		all = append(all, r.Circuits...)
		opts = []ListOption{ListCursor(r.Cursor)}
	}
	sameNames(t, "pages of 300", all, names)

	// ListAll in pages of 300: three list requests, every circuit once.
	before := listRequests(t, c)
	got, err := c.ListAll(ctx, "", nil, ListLimit(300))
	if err != nil {
		t.Fatal(err)
	}
	sameNames(t, "ListAll in pages of 300", got, names)
	if n := listRequests(t, c) - before; n != 3 {
		t.Fatalf("ListAll in pages of 300 made %d list requests, want 3", n)
	}
	// ListAll without a limit (one reply holds 750 here).
	got, err = c.ListAll(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	sameNames(t, "ListAll", got, names)

	// A circuit deleted between two pages is not listed after.
	first, err := c.List(ctx, "", nil, ListLimit(300))
	if err != nil || first.Cursor == "" {
		t.Fatalf("first page: %+v %v", first, err)
	}
	onFirst := map[string]bool{}
	for _, s := range first.Circuits {
		onFirst[s.Name] = true
	}
	var gone string
	for name := range names {
		if !onFirst[name] {
			gone = name
			break
		}
	}
	other := ownClient(t, d)
	if existed, err := other.Delete(ctx, gone); err != nil || !existed {
		t.Fatalf("delete %s: %v %v", gone, existed, err)
	}
	delete(names, gone)
	rest := first.Circuits
	for cursor := first.Cursor; cursor != ""; {
		r, err := c.List(ctx, "", nil, ListCursor(cursor), ListLimit(300))
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, r.Circuits...)
		cursor = r.Cursor
	}
	sameNames(t, "pages around a delete", rest, names)

	// Other ops between pages leave the cursor alone; ListEach stops at
	// fn's error.
	r, err := c.List(ctx, "", nil, ListLimit(10))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "page-0000", nil); err != nil {
		t.Fatal(err)
	}
	if r, err = c.List(ctx, "", nil, ListCursor(r.Cursor), ListLimit(10)); err != nil || len(r.Circuits) != 10 {
		t.Fatalf("page after a get: %+v %v", r, err)
	}
	stop := errors.New("enough")
	seen := 0
	err = c.ListEach(ctx, "", nil, func(Snapshot) error {
		seen++
		if seen == 5 {
			return stop
		}
		return nil
	}, ListLimit(3))
	if !errors.Is(err, stop) || seen != 5 {
		t.Fatalf("ListEach stopping: %v after %d", err, seen)
	}
}

func TestListPagesKeepTheFilter(t *testing.T) {
	d := cbdtest.StartT(t, "")
	c := ownClient(t, d)
	ctx := context.Background()
	createCircuits(t, c, "filter", 40)
	open := map[string]bool{}
	for i := 0; i < 40; i += 5 {
		name := fmt.Sprintf("filter-%04d", i)
		if _, err := c.SetState(ctx, name, StateOpen, SetStateOptions{}); err != nil {
			t.Fatal(err)
		}
		open[name] = true
	}
	got, err := c.ListAll(ctx, StateOpen, nil, ListLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	sameNames(t, "open circuits in pages of 3", got, open)
	for _, s := range got {
		if s.State != StateOpen {
			t.Fatalf("%s is %s", s.Name, s.State)
		}
	}
}

func TestListCursorIsTheConnections(t *testing.T) {
	d := cbdtest.StartT(t, "")
	c := ownClient(t, d)
	ctx := context.Background()
	createCircuits(t, c, "cursor", 20)
	first, err := c.List(ctx, "", nil, ListLimit(5))
	if err != nil || first.Cursor == "" || !first.Truncated {
		t.Fatalf("first page: %+v %v", first, err)
	}
	// On another client (another connection): cbd's bad_request.
	other := ownClient(t, d)
	if _, err := other.List(ctx, "", nil, ListCursor(first.Cursor)); !isBadRequest(err) {
		t.Fatalf("cursor on another client: %v", err)
	}
	// After the connection's next list: stale.
	if _, err := c.List(ctx, "", nil, ListLimit(5)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.List(ctx, "", nil, ListCursor(first.Cursor)); !isBadRequest(err) {
		t.Fatalf("stale cursor: %v", err)
	}
	if _, err := c.List(ctx, "", nil, ListCursor("l999999")); !isBadRequest(err) {
		t.Fatalf("made-up cursor: %v", err)
	}

	// Limits out of range: refused before sending, as cbd would.
	sent := c.Counters().Requests
	for _, n := range []int{0, -1, MaxListLimit + 1} {
		if _, err := c.List(ctx, "", nil, ListLimit(n)); !isBadRequest(err) {
			t.Fatalf("limit %d: %v", n, err)
		}
		if _, err := c.ListAll(ctx, "", nil, ListLimit(n)); !isBadRequest(err) {
			t.Fatalf("ListAll limit %d: %v", n, err)
		}
	}
	if c.Counters().Requests != sent {
		t.Fatal("a limit out of range was sent")
	}
	if err := c.Request(ctx, "list", map[string]any{"limit": MaxListLimit + 1}, nil); !isBadRequest(err) {
		t.Fatalf("cbd's own limit check: %v", err)
	}
	if r, err := c.List(ctx, "", nil, ListLimit(MaxListLimit)); err != nil || len(r.Circuits) != 20 || r.Cursor != "" {
		t.Fatalf("limit %d: %+v %v", MaxListLimit, r, err)
	}
	if _, err := c.ListAll(ctx, "", nil, ListCursor("l1")); !isBadRequest(err) {
		t.Fatalf("ListAll with a cursor: %v", err)
	}
}

func TestListLostConnectionIsNotRestarted(t *testing.T) {
	d := cbdtest.StartT(t, "")
	c := ownClient(t, d)
	ctx := context.Background()
	createCircuits(t, c, "lost", 20)

	// A page's cursor, then the connection goes (Close drops it): the next
	// page fails with ErrListingLost and nothing is sent.
	first, err := c.List(ctx, "", nil, ListLimit(5))
	if err != nil || first.Cursor == "" {
		t.Fatalf("first page: %+v %v", first, err)
	}
	c.Close()
	sent := c.Counters().Requests
	_, err = c.List(ctx, "", nil, ListCursor(first.Cursor))
	var e *Error
	if !errors.Is(err, ErrListingLost) || !errors.As(err, &e) || e.Code != CodeUnavailable || !Unavailable(err) {
		t.Fatalf("next page after the connection was lost: %v", err)
	}
	if c.Counters().Requests != sent+1 || c.Counters().Connects != 1 {
		t.Fatalf("a lost listing reconnected: %+v", c.Counters())
	}

	// ListEach whose connection is lost between pages fails the same way
	// instead of listing again from the start.
	seen := 0
	err = c.ListEach(ctx, "", nil, func(Snapshot) error {
		seen++
		if seen == 1 {
			c.Close()
		}
		return nil
	}, ListLimit(5))
	if !errors.Is(err, ErrListingLost) || seen != 5 {
		t.Fatalf("ListEach after the connection was lost: %v after %d circuits", err, seen)
	}
	// The Client itself goes on (a new listing on a new connection).
	all, err := c.ListAll(ctx, "", nil, ListLimit(7))
	if err != nil || len(all) != 20 {
		t.Fatalf("ListAll after: %d %v", len(all), err)
	}
}

func TestListAllPastTheOutputBound(t *testing.T) {
	// Half of max_output_bytes = 65536 holds some tens of snapshots: one
	// reply of 600 circuits is cut, ListAll follows the cursor.
	d := cbdtest.StartT(t, "[cbd]\nmax_output_bytes = 65536\n")
	c := ownClient(t, d)
	ctx := context.Background()
	names := createCircuits(t, c, "bound", 600)
	r, err := c.List(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Truncated || r.Cursor == "" || len(r.Circuits) == 0 || len(r.Circuits) >= 600 {
		t.Fatalf("unpaged list: %d circuits, truncated %v, cursor %q", len(r.Circuits), r.Truncated, r.Cursor)
	}
	before := listRequests(t, c)
	all, err := c.ListAll(ctx, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	sameNames(t, "ListAll past the output bound", all, names)
	if n := listRequests(t, c) - before; n < 2 {
		t.Fatalf("ListAll made %d list requests, want several pages", n)
	}
	st, err := c.Stats(ctx)
	if err != nil || st.Limits["list_truncated"] == 0 {
		t.Fatalf("list_truncated not counted: %+v %v", st, err)
	}
}

func TestListAllWhileOtherGoroutinesList(t *testing.T) {
	// Lists from other goroutines on the same Client wait for a listing's
	// pages (each would end its cursor); other ops go between them.
	d := cbdtest.StartT(t, "")
	c := ownClient(t, d)
	ctx := context.Background()
	names := createCircuits(t, c, "busy", 200)
	done := make(chan error, 4)
	for g := 0; g < 3; g++ {
		go func() {
			for i := 0; i < 20; i++ {
				if _, err := c.List(ctx, "", nil, ListLimit(7)); err != nil {
					done <- err
					return
				}
				if _, err := c.Get(ctx, "busy-0001", nil); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	go func() {
		for i := 0; i < 10; i++ {
			all, err := c.ListAll(ctx, "", nil, ListLimit(9))
			if err != nil {
				done <- err
				return
			}
			if len(all) != len(names) {
				done <- fmt.Errorf("ListAll %d: %d circuits, want %d", i, len(all), len(names))
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < 4; i++ {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("listings did not finish in 30 s")
		}
	}
}
