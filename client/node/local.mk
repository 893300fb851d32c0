# SPDX-License-Identifier: Apache-2.0
# client/node/local.mk — the Node.js client (cbdclient) in the tarball: its
# package, TypeScript declarations, node --test suite and example (included
# by the top Makefile.am; tests/node.sh runs the suite in make check).
EXTRA_DIST += \
	client/node/LICENSE \
	client/node/README.md \
	client/node/package.json \
	client/node/index.js \
	client/node/index.d.ts \
	client/node/src/breaker.js \
	client/node/src/cache.js \
	client/node/src/classify.js \
	client/node/src/connection.js \
	client/node/src/errors.js \
	client/node/src/http.js \
	client/node/src/local.js \
	client/node/src/machine.js \
	client/node/src/retry.js \
	client/node/test/helpers.js \
	client/node/test/breaker.test.js \
	client/node/test/bulkhead.test.js \
	client/node/test/cache.test.js \
	client/node/test/cached-peer.js \
	client/node/test/classify.test.js \
	client/node/test/example.test.js \
	client/node/test/fallback.test.js \
	client/node/test/http.test.js \
	client/node/test/imports.test.js \
	client/node/test/list.test.js \
	client/node/test/ops.test.js \
	client/node/test/policy.test.js \
	client/node/test/retry.test.js \
	client/node/test/trace.test.js \
	client/node/examples/service.js \
	client/node/bench.js
