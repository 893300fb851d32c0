#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# layering.sh — make check's layering test: every `#include "..."` of src/
# and client/ keeps to the layers declared in src/LAYERS, and no include
# cycle; with the build's object files (BUILDDIR, set by make check), no
# call goes up either and no calls go round in a cycle (tests/layering.py;
# its own test is tests/layering-selftest.sh).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
exec python3 "$top/tests/layering.py" "$top" ${BUILDDIR:+"$BUILDDIR"}
