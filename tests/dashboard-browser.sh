#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# dashboard-browser.sh — the dashboard (issue 27) in headless Chromium
# (Debian's chromium) driven by puppeteer-core from npm, against a real
# cbd: tests/dashboard-browser.js. puppeteer-core is installed once into
# the build tree (tests/dashboard-node). Writes a screenshot; with
# CBD_UPDATE_SCREENSHOT=1, docs/dashboard.png in the source tree (the
# README's). Skips (77) when chromium, node or npm is missing or the
# install fails. Needs CBD_BINARY and CBCTL_BINARY (set by make check).
set -u
srcdir=${CBD_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
. "$srcdir/tests/test-lib.sh"
PUPPETEER_VERSION=25.16.0

CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
NODE=$(command -v node || command -v nodejs || true)
if [ -z "$CHROMIUM" ] || [ -z "$NODE" ] || ! command -v npm >/dev/null 2>&1; then
	echo "dashboard-browser: SKIP (needs chromium, node and npm: apt-get install chromium nodejs npm)"
	exit 77
fi
mods=$PWD/tests/dashboard-node
if [ ! -f "$mods/node_modules/puppeteer-core/package.json" ]; then
	mkdir -p "$mods"
	if ! (cd "$mods" && npm install --no-audit --no-fund --prefix . \
		"puppeteer-core@$PUPPETEER_VERSION" >npm.log 2>&1); then
		tail -n 5 "$mods/npm.log"
		echo "dashboard-browser: SKIP (npm install puppeteer-core@$PUPPETEER_VERSION failed)"
		exit 77
	fi
fi

test_begin dashboard-browser
port=$("$NODE" -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
printf '[cbd]\nmetrics_listen = 127.0.0.1:%s\n' "$port" >"$tmp/cbd.conf"
test_cbd_start "$tmp/cbd.conf"
shot=$tmp/dashboard.png
[ "${CBD_UPDATE_SCREENSHOT:-}" = 1 ] && shot=$srcdir/docs/dashboard.png

HOME=$tmp DASHBOARD_URL="http://127.0.0.1:$port/" SCREENSHOT=$shot CHROMIUM=$CHROMIUM \
	PUPPETEER_CORE="$mods/node_modules/puppeteer-core" CBCTL_BINARY=${CBCTL_BINARY:?} \
	"$NODE" "$srcdir/tests/dashboard-browser.js"
rc=$?
[ "$rc" -eq 0 ] && [ -s "$shot" ] && echo "screenshot: $shot"
exit "$rc"
