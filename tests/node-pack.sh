#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# node-pack.sh — the Node.js client installs the way its README says, with
# no registry: the install blocks of client/node/README.md run as written
# (npm pack in a copy of the checkout's client/node, never in the source
# tree; npm install of the tarball in a new project), with the registry set
# to an unreachable loopback address. The tarball holds the package's files
# and the top LICENSE; node_modules/cbdclient is a copy, not a link, so
# the project works with the checkout's copy gone: npm ci installs it again
# offline, the package answers cbd's hello, and the README's
# protected-call sample, run from the project against a real cbd and a
# local HTTP upstream, gets the body, then trips the circuit through cbd
# and is refused without reaching the upstream (tests/client-sample.sh);
# its retries fragment runs.
# Skips (77) without npm; with Node.js older than 20 (the package's
# floor) only the packing and installing are checked.
set -u
srcdir=${CBD_SRCDIR:?}
cbd=${CBD_BINARY:?}

NODE=$(command -v node || command -v nodejs || true)
NPM=$(command -v npm || true)
if [ -z "$NODE" ] || [ -z "$NPM" ]; then
	echo "node-pack: SKIP (no node or npm: apt-get install nodejs npm)"
	exit 77
fi
run_sample=yes
"$NODE" -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' ||
	run_sample=

. "$srcdir/tests/test-lib.sh"
test_begin node-pack

. "$srcdir/tests/client-sample.sh"
readme="$srcdir/client/node/README.md"

# Only this test's npm settings: no user or global npmrc, a private cache,
# and a registry nothing answers on (nothing here may need one).
for v in $(env | sed -n 's/^\([Nn][Pp][Mm]_[Cc][Oo][Nn][Ff][Ii][Gg]_[A-Za-z_]*\)=.*/\1/p'); do
	unset "$v"
done
export HOME="$tmp/home" npm_config_cache="$tmp/npm-cache" npm_config_globalconfig=/dev/null \
	npm_config_userconfig="$tmp/npmrc" npm_config_registry=http://127.0.0.1:9/ \
	npm_config_update_notifier=false npm_config_audit=false npm_config_fund=false \
	npm_config_fetch_retries=0
mkdir -p "$HOME"
: >"$tmp/npmrc"

# 1. npm pack, in a copy of the package at client/node.
mkdir -p "$tmp/co/client"
cp -R "$srcdir/client/node" "$tmp/co/client/node"
chmod -R u+w "$tmp/co"
readme_block "$readme" "install: pack" >"$tmp/pack.sh"
tgz=$tmp/co/cbdclient-0.2.0.tgz
if [ -s "$tmp/pack.sh" ] && (cd "$tmp/co" && sh -ex "$tmp/pack.sh") >"$tmp/pack.log" 2>&1 &&
	[ -f "$tgz" ]; then
	pass "pack: $(tr '\n' ';' <"$tmp/pack.sh") made $(basename "$tgz")"
else
	fail "pack ($(cat "$tmp/pack.sh")): $(tail -n 15 "$tmp/pack.log")"
	echo "node-pack: $passed passed, $failed failed"
	exit 1
fi

# The tarball: the package's files, every module of src/, no tests, and
# the top LICENSE.
tar -tzf "$tgz" | sort >"$tmp/files"
want=$( (echo package/LICENSE package/index.js package/index.d.ts package/package.json package/README.md
	cd "$srcdir/client/node" && for f in src/*.js; do echo "package/$f"; done) | tr ' ' '\n' | sort)
if [ "$want" = "$(cat "$tmp/files")" ]; then
	pass "the tarball holds $(wc -l <"$tmp/files") files: the package's, src/ whole, no tests"
else
	fail "the tarball's files differ from the package's: $(echo "$want" | diff - "$tmp/files" | grep '^[<>]' | tr '\n' ' ')"
fi
if tar -xzOf "$tgz" package/LICENSE | cmp -s - "$srcdir/LICENSE" &&
	tar -xzOf "$tgz" package/package.json | grep -q '"license": "Apache-2.0"'; then
	pass "the tarball carries LICENSE and \"license\": \"Apache-2.0\""
else
	fail "the tarball's LICENSE or license field"
fi

# 2. A project installs the tarball by path.
mkdir -p "$tmp/app"
printf '{ "name": "app", "version": "1.0.0", "private": true, "type": "module" }\n' \
	>"$tmp/app/package.json"
cp "$tgz" "$tmp/app/"
readme_block "$readme" "install: tarball" >"$tmp/install.sh"
if [ -s "$tmp/install.sh" ] && (cd "$tmp/app" && sh -ex "$tmp/install.sh") >"$tmp/install.log" 2>&1; then
	pass "install: $(tr '\n' ';' <"$tmp/install.sh")"
else
	fail "install ($(cat "$tmp/install.sh")): $(tail -n 15 "$tmp/install.log")"
fi
if [ -d "$tmp/app/node_modules/cbdclient" ] && [ ! -L "$tmp/app/node_modules/cbdclient" ] &&
	[ -f "$tmp/app/node_modules/cbdclient/LICENSE" ] &&
	grep -Eq '"cbdclient": ?"file:cbdclient-0.2.0.tgz"' "$tmp/app/package.json"; then
	pass "node_modules/cbdclient is a copy (not a link); package.json names the tarball"
else
	fail "node_modules/cbdclient: $(ls -l "$tmp/app/node_modules" 2>&1 | tr '\n' ' ') $(cat "$tmp/app/package.json")"
fi
# Without the checkout's copy, npm ci installs the project again offline.
rm -rf "$tmp/co" "$tmp/app/node_modules"
if (cd "$tmp/app" && npm ci --offline) >"$tmp/ci.log" 2>&1 &&
	[ -f "$tmp/app/node_modules/cbdclient/index.js" ]; then
	pass "npm ci --offline installs it again, the checkout's copy gone"
else
	fail "npm ci --offline: $(tail -n 15 "$tmp/ci.log")"
fi

if [ -z "$run_sample" ]; then
	echo "node $("$NODE" --version) < 20: the package is not run"
	echo "node-pack: $passed passed, $failed failed"
	[ "$failed" -eq 0 ]
	exit
fi

# 3. The installed package against a real cbd.
sample_start_cbd
cat >"$tmp/upstream.mjs" <<'JS'
// The HTTP upstream of tests/client-sample.sh.
import fs from 'node:fs';
import http from 'node:http';
const tmp = process.argv[2];
let hits = 0;
const put = (name, text) => { fs.writeFileSync(`${tmp}/${name}.new`, text); fs.renameSync(`${tmp}/${name}.new`, `${tmp}/${name}`); };
const server = http.createServer((req, res) => {
  put('hits', String(++hits));
  if (req.url === '/users/42') res.writeHead(200).end('alice');
  else res.writeHead(503).end('down');
});
server.listen(0, '127.0.0.1', () => put('port', String(server.address().port)));
JS
"$NODE" "$tmp/upstream.mjs" "$tmp" &
test_started $!
sample_wait "$tmp/port" || exit 1

if out=$(cd "$tmp/app" && "$NODE" --input-type=module -e "
import { Client } from 'cbdclient';
import { createRequire } from 'node:module';
const where = createRequire(import.meta.url).resolve('cbdclient');
const c = new Client(undefined, { connectTimeoutMs: 10000, ioTimeoutMs: 10000 });
const r = await c.hello();
c.close();
if (r.ok !== true || !where.startsWith(process.cwd() + '/node_modules/cbdclient/')) process.exit(1);
console.log(where);" 2>&1); then
	pass "the project's cbdclient ($out) answers hello"
else
	fail "the installed cbdclient: $out"
fi

readme_block "$readme" "sample: protected-call" >"$tmp/app/sample.js"
# The retries fragment after the sample (its breaker and url), the
# sample's closing of the breaker moved to the end.
{ sed '/^} finally {$/,/^}$/d' "$tmp/app/sample.js"; echo '}'
	readme_block "$readme" "sample: retries"
	echo 'console.log(`retry: ${body}`);'; echo 'await users.close();'; } >"$tmp/app/retries.js"
out=$(cd "$tmp/app" && USERS_URL="$base/users/42" "$NODE" retries.js 2>&1)
if [ "$out" = "alice
retry: alice" ]; then
	pass "the README's retries fragment runs"
else
	fail "the README's retries fragment printed: $out"
fi
if [ -s "$tmp/app/sample.js" ]; then
	check_sample "from the tarball" env -C "$tmp/app" "$NODE" sample.js
else
	fail "no <!-- sample: protected-call --> block in $readme"
fi

test_end
