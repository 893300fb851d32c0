# SPDX-License-Identifier: Apache-2.0
# client/python/local.mk — the Python client (cbdclient) in the tarball:
# its package, pytest suite and example (included by the top Makefile.am;
# tests/python.sh runs the suite in make check).
EXTRA_DIST += \
	client/python/LICENSE \
	client/python/README.md \
	client/python/pyproject.toml \
	client/python/.gitignore \
	client/python/src/cbdclient/__init__.py \
	client/python/src/cbdclient/aio.py \
	client/python/src/cbdclient/breaker.py \
	client/python/src/cbdclient/cache.py \
	client/python/src/cbdclient/classify.py \
	client/python/src/cbdclient/connection.py \
	client/python/src/cbdclient/errors.py \
	client/python/src/cbdclient/httpx_transport.py \
	client/python/src/cbdclient/local.py \
	client/python/src/cbdclient/machine.py \
	client/python/src/cbdclient/middleware.py \
	client/python/src/cbdclient/protocol.py \
	client/python/src/cbdclient/requests_adapter.py \
	client/python/src/cbdclient/retry.py \
	client/python/tests/conftest.py \
	client/python/tests/test_aio.py \
	client/python/tests/test_breaker.py \
	client/python/tests/test_bulkhead.py \
	client/python/tests/test_cache.py \
	client/python/tests/test_classify.py \
	client/python/tests/test_example.py \
	client/python/tests/test_fallback.py \
	client/python/tests/test_imports.py \
	client/python/tests/test_integrations.py \
	client/python/tests/test_machine.py \
	client/python/tests/test_ops.py \
	client/python/tests/test_pages.py \
	client/python/tests/test_policy_rev.py \
	client/python/tests/test_retry.py \
	client/python/tests/test_trace.py \
	client/python/examples/service.py \
	client/python/bench.py \
	tests/python.sh
