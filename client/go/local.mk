# SPDX-License-Identifier: Apache-2.0
# client/go/local.mk — the Go client (module cbd.example/cbdclient) in the
# tarball: its package, go test suite and example (included by the top
# Makefile.am; tests/go.sh runs the suite in make check).
EXTRA_DIST += \
	client/go/LICENSE \
	client/go/README.md \
	client/go/go.mod \
	client/go/breaker.go \
	client/go/cache.go \
	client/go/classify.go \
	client/go/conn.go \
	client/go/errors.go \
	client/go/local.go \
	client/go/machine.go \
	client/go/middleware.go \
	client/go/ops.go \
	client/go/retry.go \
	client/go/transport.go \
	client/go/internal/cbdtest/daemon.go \
	client/go/bench_test.go \
	client/go/breaker_test.go \
	client/go/bulkhead_test.go \
	client/go/cache_test.go \
	client/go/classify_test.go \
	client/go/fallback_test.go \
	client/go/fold_test.go \
	client/go/list_test.go \
	client/go/main_test.go \
	client/go/middleware_test.go \
	client/go/ops_test.go \
	client/go/policy_test.go \
	client/go/retry_test.go \
	client/go/trace_test.go \
	client/go/util_test.go \
	client/go/examples/service/main.go \
	client/go/examples/service/main_test.go
