// bench_test.go — figures only (go test -bench .; never run by make
// check): a protected call against cbd (allow + record), the same with 8
// goroutines sharing the breaker, and with cbd unreachable (LOCAL).

package cbdclient

import (
	"context"
	"testing"
)

func BenchmarkExecute(b *testing.B) {
	d := benchCbd(b)
	br, err := NewBreaker("bench-execute", BreakerOptions{Client: NewClient(Options{Socket: d})})
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
	br, err := NewBreaker("bench-parallel", BreakerOptions{Client: NewClient(Options{Socket: d})})
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
