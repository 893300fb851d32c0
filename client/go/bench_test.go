// SPDX-License-Identifier: Apache-2.0

// bench_test.go — figures only (go test -run XXX -bench .; never run by
// make check): a protected call against cbd (allow + record), the same
// with 8 goroutines sharing the breaker, and with cbd unreachable (LOCAL);
// then the cached mode, as medians and 99th percentiles of single calls
// (p50-ns, p99-ns): a closed call cached and uncached, an open call
// refused by the cache, and the propagation of a trip made on another
// connection until the cache refuses.

package cbdclient

import (
	"context"
	"sort"
	"testing"
	"time"
)

func BenchmarkExecute(b *testing.B) {
	d := benchCbd(b)
	br, err := NewBreaker("bench-execute", BreakerOptions{Client: NewClient(Options{Socket: d}),
		Cache: CacheOff})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := br.Execute(ctx, succeeding); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExecuteParallel(b *testing.B) {
	d := benchCbd(b)
	br, err := NewBreaker("bench-parallel", BreakerOptions{Client: NewClient(Options{Socket: d}),
		Cache: CacheOff})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := br.Execute(ctx, succeeding); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkExecuteLocal(b *testing.B) {
	br, err := NewBreaker("bench-local", BreakerOptions{
		Client: NewClient(Options{Socket: "/nonexistent/cbd.sock"})})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := br.Execute(ctx, succeeding); err != nil {
			b.Fatal(err)
		}
	}
}

// benchCbd is the shared cbd's socket (the benchmark is skipped without it).
func benchCbd(b *testing.B) string {
	if shared == nil {
		sharedOnce.Do(func() { shared, sharedErr = startShared() })
	}
	if sharedErr != nil || shared == nil {
		b.Skip("no cbd")
	}
	return shared.Socket
}

// reportPercentiles reports the median and the 99th percentile of costs.
func reportPercentiles(b *testing.B, costs []time.Duration) {
	b.StopTimer()
	if len(costs) == 0 {
		return
	}
	sort.Slice(costs, func(i, j int) bool { return costs[i] < costs[j] })
	b.ReportMetric(float64(costs[len(costs)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(costs[len(costs)*99/100].Nanoseconds()), "p99-ns")
}

// benchBreaker is a breaker on the shared cbd whose first (uncached)
// call was made and, when cached, whose circuit the cache has read.
func benchBreaker(b *testing.B, name string, mode CacheMode) *Breaker {
	c := NewClient(Options{Socket: benchCbd(b)})
	b.Cleanup(func() { c.Close() })
	br, err := NewBreaker(name, BreakerOptions{Client: c, Cache: mode,
		Policy: Ctx{"failure_threshold": 1, "break_ms": 600000}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.SetState(ctx, name, StateClosed, SetStateOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := br.Execute(ctx, succeeding); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, ok := cachedEntry(br); mode != CacheOff && !ok; _, ok = cachedEntry(br) {
		if time.Now().After(deadline) {
			b.Fatal("the cache did not read the circuit")
		}
		time.Sleep(time.Millisecond)
	}
	return br
}

func benchCalls(b *testing.B, br *Breaker, wantErr bool) {
	ctx := context.Background()
	costs := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range costs {
		start := time.Now()
		err := br.Execute(ctx, succeeding)
		costs[i] = time.Since(start)
		if (err != nil) != wantErr {
			b.Fatal(err)
		}
	}
	reportPercentiles(b, costs)
}

func BenchmarkCallClosedCached(b *testing.B) {
	br := benchBreaker(b, "bench-closed-cached", CacheAuto)
	benchCalls(b, br, false)
	if br.UncachedCalls() != 1 {
		b.Fatalf("%d uncached calls", br.UncachedCalls())
	}
}

func BenchmarkCallClosedUncached(b *testing.B) {
	benchCalls(b, benchBreaker(b, "bench-closed-uncached", CacheOff), false)
}

func BenchmarkCallOpenCached(b *testing.B) {
	br := benchBreaker(b, "bench-open-cached", CacheAuto)
	if _, err := br.Client().SetState(context.Background(), br.Name, StateOpen, SetStateOptions{}); err != nil {
		b.Fatal(err)
	}
	for cachedState(br) != StateOpen {
		time.Sleep(time.Millisecond)
	}
	benchCalls(b, br, true)
	if br.CacheRefusals() < int64(b.N) {
		b.Fatalf("%d refusals from the cache", br.CacheRefusals())
	}
}

// BenchmarkPropagation: a set_state open sent on one connection until the
// cache of another refuses (the time a call would keep running after a
// trip elsewhere; its round trip included, and up to one 10 µs poll); the
// circuit is closed again between samples.
func BenchmarkPropagation(b *testing.B) {
	br := benchBreaker(b, "bench-propagation", CacheAuto)
	admin := NewClient(Options{Socket: benchCbd(b)})
	defer admin.Close()
	u := br.cacheUse.Load()
	var seen, seen2 uint64
	refused := func() bool {
		v, _, _, _ := u.cache.decide(u.entry, &seen, &seen2, nil)
		return v == cacheRefuse
	}
	ctx := context.Background()
	costs := make([]time.Duration, b.N)
	b.ResetTimer()
	for i := range costs {
		b.StopTimer()
		if _, err := admin.SetState(ctx, br.Name, StateClosed, SetStateOptions{}); err != nil {
			b.Fatal(err)
		}
		for cachedState(br) != StateClosed {
			time.Sleep(100 * time.Microsecond)
		}
		b.StartTimer()
		start := time.Now()
		if _, err := admin.SetState(ctx, br.Name, StateOpen, SetStateOptions{}); err != nil {
			b.Fatal(err)
		}
		for !refused() {
			// Polled, not spun: a goroutine spinning on every P keeps the
			// scheduler from polling the network (sysmon does, every 10 ms).
			time.Sleep(10 * time.Microsecond)
		}
		costs[i] = time.Since(start)
	}
	reportPercentiles(b, costs)
}
