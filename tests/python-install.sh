#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# python-install.sh — the Python client installs the ways its README says,
# with Debian's /usr/bin/python3 in plain `python3 -m venv` venvs: the
# install blocks of client/python/README.md run as written, in copies of
# the checkout's client/python (never in the source tree):
#   - "index": a plain venv and `pip install client/python`, pip's index
#     being a local PEP 503 index (file: URL) holding only Debian's
#     setuptools and wheel wheels: the build-isolation path pip takes with
#     PyPI, without a network;
#   - "offline": a --system-site-packages venv and pip with
#     --no-build-isolation --no-index (Debian's setuptools and wheel);
#   - "wheel": pip wheel in the offline venv; the wheel then installs with
#     --no-index into the first venv.
# Each installed package imports from its venv and answers cbd's hello, and
# the README's protected-call sample, run by each venv's python against a
# real cbd and a local HTTP upstream, gets the body, then trips the circuit
# and is refused without reaching the upstream; its retries fragment runs. The wheel and the sdist
# (setuptools' PEP 517 hook) carry LICENSE and License: Apache-2.0.
# Skips (77) when python3 >= 3.11, venv, setuptools, wheel or Debian's
# setuptools/wheel wheels (python3-setuptools-whl, python3-wheel-whl) are
# missing.
set -u
PY=/usr/bin/python3
WHEELS=/usr/share/python-wheels
srcdir=${CBD_SRCDIR:?}
cbd=${CBD_BINARY:?}

skip() {
	echo "python-install: SKIP ($1)"
	exit 77
}
[ -x "$PY" ] || skip "no /usr/bin/python3"
"$PY" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null || skip "python3 < 3.11"
"$PY" -c 'import venv, ensurepip' 2>/dev/null || skip "no venv: apt-get install python3-venv"
"$PY" -c 'import setuptools, wheel' 2>/dev/null ||
	skip "apt-get install python3-setuptools python3-wheel"
set -- "$WHEELS"/setuptools-*.whl
[ -f "$1" ] || skip "no setuptools wheel in $WHEELS: apt-get install python3-setuptools-whl"
setuptools_whl=$1
set -- "$WHEELS"/wheel-*.whl
[ -f "$1" ] || skip "no wheel wheel in $WHEELS: apt-get install python3-wheel-whl"
wheel_whl=$1

. "$srcdir/tests/test-lib.sh"
test_begin python-install

# Only this test's settings reach pip: no user or site config, no index or
# find-links from the environment (this machine sets PIP_FIND_LINKS).
for v in $(env | sed -n 's/^\(PIP_[A-Z_]*\)=.*/\1/p'); do unset "$v"; done
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
export HOME="$tmp/home" PIP_CACHE_DIR="$tmp/pip-cache"
# Debian's python3 and pip, not a pyenv or other shim first on PATH.
export PATH=/usr/bin:/bin
mkdir -p "$HOME"

. "$srcdir/tests/client-sample.sh"
readme="$srcdir/client/python/README.md"

# A copy of the package, at client/python under $1 (the README's commands
# run from the top of a checkout).
checkout() {
	mkdir -p "$1/client"
	cp -R "$srcdir/client/python" "$1/client/python"
	chmod -R u+w "$1"
	rm -rf "$1/client/python/build" "$1/client/python/dist"
	find "$1" -name '*.egg-info' -prune -exec rm -rf {} +
}

sample_start_cbd
# The HTTP upstream (see client-sample.sh); its port goes to $tmp/port.
cat >"$tmp/upstream.py" <<'PY'
import http.server, os, sys
tmp, hits = sys.argv[1], 0
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        global hits
        hits += 1
        with open(tmp + "/hits.new", "w") as f:
            f.write(str(hits))
        os.rename(tmp + "/hits.new", tmp + "/hits")
        body, status = (b"alice", 200) if self.path == "/users/42" else (b"down", 503)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
with open(tmp + "/port.new", "w") as f:
    f.write(str(s.server_address[1]))
os.rename(tmp + "/port.new", tmp + "/port")
s.serve_forever()
PY
"$PY" "$tmp/upstream.py" "$tmp" &
test_started $!
sample_wait "$tmp/port" || exit 1

readme_block "$readme" "sample: protected-call" >"$tmp/sample.py"
[ -s "$tmp/sample.py" ] || fail "no <!-- sample: protected-call --> block in $readme"
{ cat "$tmp/sample.py"; readme_block "$readme" "sample: retries"; echo 'print("retry:", body)'; } \
	>"$tmp/retries.py"

# The installed package: imported from the venv (not from a source tree),
# it answers cbd's hello.
check_installed() { # venv-dir label
	if out=$(cd "$tmp" && "$1/bin/python" -c '
import sys, cbdclient
assert cbdclient.__file__.startswith(sys.prefix), cbdclient.__file__
with cbdclient.Client(connect_timeout=10, io_timeout=10) as c:
    assert c.hello()["ok"] is True
print(cbdclient.__version__, cbdclient.__file__)' 2>&1); then
		pass "$2: cbdclient $out answers hello"
	else
		fail "$2: the installed cbdclient: $out"
	fi
}

# The README's sample, run by the venv $1's python (see client-sample.sh);
# then the circuit is deleted, so the next venv's runs start closed.
venv_sample() { # venv-dir label
	# The retries fragment, after the sample (it uses its breaker and URL).
	out=$(cd "$tmp" && USERS_URL="$base/users/42" "$1/bin/python" "$tmp/retries.py" 2>&1)
	if [ "$out" = "alice
retry: alice" ]; then
		pass "$2: the README's retries fragment runs"
	else
		fail "$2: the README's retries fragment printed: $out"
	fi
	check_sample "$2" env -C "$tmp" "$1/bin/python" "$tmp/sample.py"
	"$PY" - <<PY
import socket
s = socket.socket(socket.AF_UNIX); s.connect("$CBD_SOCKET")
s.sendall(b'{"op":"delete","name":"users"}\n'); s.recv(4096)
PY
}

# 1. With an index: a local PEP 503 index of Debian's wheels.
mkdir -p "$tmp/index/setuptools" "$tmp/index/wheel"
for whl in "$setuptools_whl" "$wheel_whl"; do
	project=$(basename "$whl" | sed 's/-.*//')
	cp "$whl" "$tmp/index/$project/"
	printf '<!DOCTYPE html><html><body><a href="%s">%s</a></body></html>\n' \
		"$(basename "$whl")" "$(basename "$whl")" >"$tmp/index/$project/index.html"
done
printf '<!DOCTYPE html><html><body><a href="setuptools/">setuptools</a><a href="wheel/">wheel</a></body></html>\n' \
	>"$tmp/index/index.html"
checkout "$tmp/index-co"
readme_block "$readme" "install: index" >"$tmp/index.sh"
if [ ! -s "$tmp/index.sh" ]; then
	fail "no <!-- install: index --> block in $readme"
elif (cd "$tmp/index-co" && PIP_INDEX_URL="file://$tmp/index" sh -ex "$tmp/index.sh") \
	>"$tmp/index.log" 2>&1; then
	pass "with an index: $(tr '\n' ';' <"$tmp/index.sh")"
	grep -E 'Looking in indexes|Installing build dependencies|Successfully' "$tmp/index.log"
	check_installed "$tmp/index-co/venv" "with an index"
	venv_sample "$tmp/index-co/venv" "with an index"
else
	fail "with an index: $(tail -n 15 "$tmp/index.log")"
fi

# 2. Without an index.
checkout "$tmp/offline-co"
readme_block "$readme" "install: offline" >"$tmp/offline.sh"
if [ ! -s "$tmp/offline.sh" ]; then
	fail "no <!-- install: offline --> block in $readme"
elif (cd "$tmp/offline-co" && sh -ex "$tmp/offline.sh") >"$tmp/offline.log" 2>&1; then
	pass "offline: $(tr '\n' ';' <"$tmp/offline.sh")"
	check_installed "$tmp/offline-co/venv" "offline"
	venv_sample "$tmp/offline-co/venv" "offline"
else
	fail "offline: $(tail -n 15 "$tmp/offline.log")"
fi

# 3. The wheel, built in the offline venv, installed into the first venv
# without an index.
readme_block "$readme" "install: wheel" >"$tmp/wheel.sh"
if [ -s "$tmp/wheel.sh" ] && [ -x "$tmp/offline-co/venv/bin/pip" ] &&
	(cd "$tmp/offline-co" && sh -ex "$tmp/wheel.sh") >"$tmp/wheel.log" 2>&1 &&
	set -- "$tmp"/offline-co/dist/cbdclient-*.whl && [ -f "$1" ]; then
	whl=$1
	pass "wheel: $(tr '\n' ';' <"$tmp/wheel.sh") made $(basename "$whl")"
	if [ -x "$tmp/index-co/venv/bin/pip" ] &&
		"$tmp/index-co/venv/bin/pip" install --no-index --force-reinstall "$whl" \
			>"$tmp/wheel-install.log" 2>&1; then
		pass "the wheel installs with --no-index"
		check_installed "$tmp/index-co/venv" "from the wheel"
	else
		fail "installing the wheel: $(tail -n 15 "$tmp/wheel-install.log" 2>/dev/null)"
	fi
else
	whl=
	fail "wheel: $(tail -n 15 "$tmp/wheel.log" 2>/dev/null)"
fi

# 4. The sdist, by setuptools' PEP 517 hook (what `python3 -m build
# --sdist` calls), from a pristine copy; its licence and the wheel's.
checkout "$tmp/sdist-co"
if (cd "$tmp/sdist-co/client/python" && "$PY" -c '
from setuptools import build_meta
print(build_meta.build_sdist("dist"))') >"$tmp/sdist.log" 2>&1 &&
	set -- "$tmp"/sdist-co/client/python/dist/cbdclient-*.tar.gz && [ -f "$1" ]; then
	sdist=$1
	pass "sdist: $(basename "$sdist")"
else
	sdist=
	fail "sdist: $(tail -n 15 "$tmp/sdist.log")"
fi
if out=$("$PY" - "$srcdir/LICENSE" "$whl" "$sdist" <<'PY' 2>&1
import sys, tarfile, zipfile
licence = open(sys.argv[1], "rb").read()
problems = []
def check(kind, names, read, meta_name, lic_name):
    meta = read(meta_name).decode()
    if "License: Apache-2.0" not in meta.splitlines():
        problems.append(f"{kind}: no 'License: Apache-2.0' in {meta_name}")
    if "License-File: LICENSE" not in meta.splitlines():
        problems.append(f"{kind}: no 'License-File: LICENSE' in {meta_name}")
    if "Classifier: License :: OSI Approved :: Apache Software License" not in meta:
        problems.append(f"{kind}: no Apache licence classifier")
    if lic_name not in names or read(lic_name) != licence:
        problems.append(f"{kind}: {lic_name} missing or not the top LICENSE")
    if not any(n.endswith("cbdclient/protocol.py") for n in names):
        problems.append(f"{kind}: cbdclient/protocol.py missing")
whl, sdist = sys.argv[2], sys.argv[3]
if whl:
    z = zipfile.ZipFile(whl)
    check("wheel", z.namelist(), z.read, "cbdclient-0.2.0.dist-info/METADATA",
          "cbdclient-0.2.0.dist-info/LICENSE")
if sdist:
    t = tarfile.open(sdist)
    check("sdist", t.getnames(), lambda n: t.extractfile(n).read(), "cbdclient-0.2.0/PKG-INFO",
          "cbdclient-0.2.0/LICENSE")
print("\n".join(problems))
sys.exit(1 if problems or not (whl and sdist) else 0)
PY
); then
	pass "the wheel and the sdist carry LICENSE, License: Apache-2.0 and its classifier"
else
	fail "licence in the packages: $out"
fi

test_end
