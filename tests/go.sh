#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# go.sh — the Go client's suite (client/go: go test ./...) against a real
# cbd: every op, the breaker, the store policies with cbd killed and
# SIGSTOPped, the classifiers and the RoundTripper, retries in virtual
# time, the example service, and the replay of proto/traces/state-machine.json.
# Needs CBD_BINARY and CBD_SRCDIR (set by make check). Skips (77) when
# Go (Debian's golang-go, 1.19 or later) is missing. Nothing is written
# into the source tree: the build cache, GOPATH and HOME are temporary.
set -u

GO=$(command -v go || true)
if [ -z "$GO" ] || ! "$GO" version >/dev/null 2>&1; then
	echo "go: SKIP (no go: apt-get install golang-go)"
	exit 77
fi

srcdir=${CBD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d /tmp/go-test.XXXXXX)
cleanup() {
	chmod -R u+w "$tmp" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
mkdir -p "$tmp/home" "$tmp/gopath" "$tmp/cache"
log=$tmp/log

cd "$srcdir/client/go" || exit 1
HOME=$tmp/home GOPATH=$tmp/gopath GOCACHE=$tmp/cache GOFLAGS=-mod=mod \
	GOPROXY=off GOSUMDB=off GO111MODULE=on GOTOOLCHAIN=local \
	CBD_BINARY=${CBD_BINARY:-} CBD_SRCDIR=$srcdir \
	"$GO" test -count=1 -timeout 120s -v ./... >"$log" 2>&1
status=$?

grep -E '^(\s*--- (PASS|FAIL|SKIP)|ok |FAIL|panic:)' "$log"
[ "$status" -eq 0 ] || cat "$log"
passed=$(grep -cE '^\s*--- PASS' "$log")
failed=$(grep -cE '^\s*--- FAIL' "$log")
# A package that did not build or a run that failed without a test failing.
[ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "go: $passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
