#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# go-module.sh — the Go client is used the way its README says, with no
# module proxy: in a new module next to a link to the checkout (../cbd),
# the install blocks of client/go/README.md run as written (go mod edit
# -replace, then GOPROXY=off GOFLAGS=-mod=mod go build of the README's
# protected-call sample as the module's main package); go.mod gains the
# replace and the require. Then go mod vendor, the checkout's link
# removed, and the build again from vendor/ (LICENSE included). The
# sample, run against a real cbd and a local HTTP upstream, gets the body,
# then trips the circuit through cbd and is refused without reaching the
# upstream (tests/client-sample.sh); the vendored build is refused too.
# The README's retries fragment compiles (go vet).
# Nothing is written into the source tree: HOME, GOPATH and the build
# cache are temporary. Skips (77) when Go (golang-go) is missing.
set -u
srcdir=${CBD_SRCDIR:?}
cbd=${CBD_BINARY:?}

GO=$(command -v go || true)
if [ -z "$GO" ] || ! "$GO" version >/dev/null 2>&1; then
	echo "go-module: SKIP (no go: apt-get install golang-go)"
	exit 77
fi

. "$srcdir/tests/test-lib.sh"
test_begin go-module

. "$srcdir/tests/client-sample.sh"
readme="$srcdir/client/go/README.md"

# Only this test's Go settings (GOPROXY and GOFLAGS as the README says).
unset GOFLAGS GOPROXY GOPRIVATE GONOPROXY GOWORK
export HOME="$tmp/home" GOPATH="$tmp/gopath" GOCACHE="$tmp/cache" GOSUMDB=off \
	GO111MODULE=on GOTOOLCHAIN=local GOENV=off
mkdir -p "$HOME"

# The upstream of client-sample.sh, a module of its own (standard library).
mkdir -p "$tmp/upstream"
printf 'module upstream\n\ngo 1.19\n' >"$tmp/upstream/go.mod"
cat >"$tmp/upstream/main.go" <<'GO'
// The HTTP upstream of tests/client-sample.sh.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
)

func put(dir, name, text string) {
	_ = os.WriteFile(dir+"/"+name+".new", []byte(text), 0o644)
	_ = os.Rename(dir+"/"+name+".new", dir+"/"+name)
}

func main() {
	dir := os.Args[1]
	var mu sync.Mutex
	hits := 0
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	put(dir, "port", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		put(dir, "hits", strconv.Itoa(hits))
		mu.Unlock()
		if r.URL.Path == "/users/42" {
			_, _ = w.Write([]byte("alice"))
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("down"))
	}))
}
GO

# The user's module: the sample as its main package, the checkout at ../cbd.
ln -s "$srcdir" "$tmp/cbd"
mkdir -p "$tmp/app"
printf 'module example.com/app\n\ngo 1.19\n' >"$tmp/app/go.mod"
readme_block "$readme" "sample: protected-call" >"$tmp/app/main.go"
[ -s "$tmp/app/main.go" ] || fail "no <!-- sample: protected-call --> block in $readme"
readme_block "$readme" "install: module" >"$tmp/module.sh"
if [ -s "$tmp/module.sh" ] && (cd "$tmp/app" && sh -ex "$tmp/module.sh") >"$tmp/module.log" 2>&1 &&
	[ -x "$tmp/app/app" ]; then
	pass "module: $(tr '\n' ';' <"$tmp/module.sh") built the README sample"
else
	fail "module ($(cat "$tmp/module.sh")): $(tail -n 15 "$tmp/module.log")"
fi
if grep -q '^replace cbd.example/cbdclient => ../cbd/client/go$' "$tmp/app/go.mod" &&
	grep -q '^require cbd.example/cbdclient v0.0.0-00010101000000-000000000000$' "$tmp/app/go.mod"; then
	pass "go.mod has the replace and the require"
else
	fail "go.mod: $(cat "$tmp/app/go.mod")"
fi
(cd "$tmp/upstream" && GOPROXY=off "$GO" build -o upstream .) >"$tmp/upstream.log" 2>&1 ||
	{ echo "the upstream does not build: $(cat "$tmp/upstream.log")"; exit 1; }

# Vendored: builds with the checkout gone.
readme_block "$readme" "install: vendor" >"$tmp/vendor.sh"
if [ -s "$tmp/vendor.sh" ] && (cd "$tmp/app" && sh -ex "$tmp/vendor.sh") >"$tmp/vendor.log" 2>&1 &&
	cmp -s "$tmp/app/vendor/cbd.example/cbdclient/LICENSE" "$srcdir/LICENSE"; then
	pass "vendor: $(tr '\n' ';' <"$tmp/vendor.sh") copies the package and its LICENSE"
else
	fail "vendor ($(cat "$tmp/vendor.sh")): $(tail -n 15 "$tmp/vendor.log")"
fi
# The retries fragment compiles (go vet) in a main of its own, with the
# names it uses (users, ctx, call) declared around it.
mkdir -p "$tmp/app/retries"
{ printf 'package main\n\nimport (\n\t"context"\n\t"fmt"\n\t"time"\n\n\t"cbd.example/cbdclient"\n)\n\n'
	printf 'func call(ctx context.Context) error { return nil }\n\nfunc main() {\n'
	printf '\tctx := context.Background()\n'
	printf '\tusers, _ := cbdclient.NewBreaker("users", cbdclient.BreakerOptions{})\n'
	readme_block "$readme" "sample: retries"
	printf '\tfmt.Println(err)\n}\n'; } >"$tmp/app/retries/main.go"
if (cd "$tmp/app" && GOPROXY=off "$GO" vet ./retries) >"$tmp/vet.log" 2>&1; then
	pass "the README's retries fragment compiles (go vet)"
else
	fail "the README's retries fragment: $(tail -n 15 "$tmp/vet.log")"
fi
rm "$tmp/cbd"
if (cd "$tmp/app" && GOPROXY=off "$GO" build -o app-vendored .) >"$tmp/vendored.log" 2>&1; then
	pass "the module builds from vendor/ without the checkout"
else
	fail "the build from vendor/: $(tail -n 15 "$tmp/vendored.log")"
fi

# The sample against a real cbd.
sample_start_cbd
"$tmp/upstream/upstream" "$tmp" &
test_started $!
sample_wait "$tmp/port" || exit 1
if [ -x "$tmp/app/app" ]; then
	check_sample "go (replace)" "$tmp/app/app"
	if [ -x "$tmp/app/app-vendored" ]; then
		before=$(sample_hits)
		out=$(USERS_URL="$base/fail" "$tmp/app/app-vendored" 2>&1)
		case "$out" in
		"users is open: retry in "*)
			if [ "$(sample_hits)" = "$before" ]; then
				pass "go (vendored): refused by cbd too"
			else
				fail "go (vendored): refused, but the upstream was called"
			fi ;;
		*) fail "go (vendored) printed: $out" ;;
		esac
	fi
fi

test_end
