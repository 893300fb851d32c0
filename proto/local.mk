# SPDX-License-Identifier: Apache-2.0
# proto/local.mk — the protocol reference and the golden request/reply
# examples that tests/cbd-ops-test.c replays against a real cbd.
# PROTOCOL.md is installed with the docs: client authors read it there;
# LICENSE beside it (Debian and make install alike).
dist_doc_DATA = proto/PROTOCOL.md LICENSE
EXTRA_DIST += proto/traces/state-machine.json proto/traces/generate.py \
	proto/examples/hello.txt \
	proto/examples/holds.txt \
	proto/examples/rates.txt \
	proto/examples/session.txt \
	proto/examples/store.txt \
	proto/examples/errors.txt
