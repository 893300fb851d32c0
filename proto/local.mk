# proto/local.mk — the protocol reference and the golden request/reply
# examples that tests/cbd-ops-test.c replays against a real cbd.
EXTRA_DIST += proto/PROTOCOL.md \
	proto/examples/hello.txt \
	proto/examples/session.txt \
	proto/examples/store.txt \
	proto/examples/errors.txt
