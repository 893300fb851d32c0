#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""layering.py — the layering check of cbd's C code (in the spirit of
Chromium's checkdeps and Python's import-linter).

Reads the declared table (src/LAYERS: which layer each file is in, which
layers each layer may include) and the `#include "..."` lines of every .c
and .h under src/ and client/ (client/<language>/ excepted), and fails,
naming the file, its line and the include, on:
  - an include of a header whose layer the file's layer may not use
    (upward, or sideways in a layer not marked `sideways`);
  - a file, or an included header, that no layer names;
  - an include cycle between modules (a module: a .c and its .h).
Exceptions are `allow FILE HEADER` lines of the table.

With a build directory (second argument, or $BUILDDIR), the same rules
hold for calls: the symbols each object file of libcbbase, libcbcore,
libcbdaemon and libcbclient uses (nm) are matched to the module that
defines them, and a call into a layer the caller may not use, or a cycle
of calls between modules, fails too (hooks registered by an upper layer
are pointers, not calls, and so are not edges).

usage: layering.py [SRCDIR [BUILDDIR]]   (default: the tree this file is in)
Exit status 0 when the tree keeps its layers, 1 when not, 2 on a bad table.
"""
import fnmatch
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# The folders a quoted include is looked up in after the including file's
# own (Makefile.am's AM_CPPFLAGS).
SEARCH = ("src", "src/core", "client")
# Folders of other languages' clients, not C.
SKIP = ("client/python", "client/node", "client/go", "client/completion", "client/examples")


class Table:
    def __init__(self):
        self.layers = []  # names, bottom first
        self.uses = {}  # layer -> set of layers it may include
        self.sideways = set()
        self.patterns = []  # (pattern, layer)
        self.external = set()
        self.allowed = {}  # (file, header) -> why


def read_table(path):
    t = Table()
    layer = None
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("allow") else raw.strip()
            if not line:
                continue
            words = line.split()
            if words[0] == "layer":
                if len(words) < 2 or words[1] in t.uses:
                    sys.exit(f"{path}:{n}: a layer needs a new name")
                layer = words[1]
                rest = words[2:]
                if rest and rest[0] == "sideways":
                    t.sideways.add(layer)
                    rest = rest[1:]
                if rest and rest[0] != "uses":
                    sys.exit(f"{path}:{n}: expected `uses`, found {rest[0]!r}")
                used = set(rest[1:])
                for u in used:
                    if u not in t.uses:
                        sys.exit(f"{path}:{n}: layer {layer} uses {u}, which is not a layer below it")
                t.layers.append(layer)
                t.uses[layer] = used
            elif words[0] == "external":
                t.external.update(words[1:])
            elif words[0] == "allow":
                body, _, why = line.partition("#")
                parts = body.split()
                if len(parts) != 3 or not why.strip():
                    sys.exit(f"{path}:{n}: allow FILE HEADER # why (the why is required)")
                t.allowed[(parts[1], parts[2])] = why.strip()
            else:
                if layer is None:
                    sys.exit(f"{path}:{n}: a path before any layer")
                for w in words:
                    t.patterns.append((w, layer))
    return t


def layer_of(t, module):
    for pattern, layer in t.patterns:
        if fnmatch.fnmatchcase(module, pattern) and "/" not in module[len(pattern.rsplit("/", 1)[0]) + 1:]:
            return layer
    return None


def sources(root):
    out = []
    for top in ("src", "client"):
        for d, dirs, files in os.walk(os.path.join(root, top)):
            rel = os.path.relpath(d, root)
            dirs[:] = sorted(x for x in dirs if os.path.join(rel, x) not in SKIP)
            for name in sorted(files):
                if name.endswith((".c", ".h")) and name != "fleet-script.c":
                    out.append(os.path.normpath(os.path.join(rel, name)))
    return out


def resolve(root, including, header):
    for d in (os.path.dirname(including),) + SEARCH:
        cand = os.path.normpath(os.path.join(d, header))
        if os.path.exists(os.path.join(root, cand)):
            return cand
    return None


def module(path):
    return os.path.splitext(path)[0]


def check(root, table_path):
    t = read_table(table_path)
    errors = []
    edges = {}  # module -> {module: (file, line, header)}
    used_allows = set()
    for f in sources(root):
        m = module(f)
        mine = layer_of(t, m)
        if mine is None:
            errors.append(f"{f}: no layer in {os.path.relpath(table_path, root)} names this file")
            continue
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as src:
            for n, line in enumerate(src, 1):
                hit = INCLUDE.match(line)
                if not hit:
                    continue
                header = hit.group(1)
                if header in t.external:
                    continue
                target = resolve(root, f, header)
                where = f'{f}:{n}: #include "{header}"'
                if target is None:
                    errors.append(f"{where}: no such header under src/ or client/")
                    continue
                tm = module(target)
                if tm == m:
                    continue
                edges.setdefault(m, {}).setdefault(tm, (f, n, header))
                theirs = layer_of(t, tm)
                if (f, header) in t.allowed:
                    used_allows.add((f, header))
                    continue
                if theirs is None:
                    errors.append(f"{where}: {target} is in no layer")
                elif theirs == mine:
                    if mine not in t.sideways:
                        errors.append(f"{where}: sideways within layer {mine}, which does not allow it")
                elif theirs not in t.uses[mine]:
                    up = t.layers.index(theirs) > t.layers.index(mine)
                    errors.append(
                        f"{where}: {'goes up' if up else 'reaches'} from layer {mine} to layer "
                        f"{theirs} ({mine} uses: {' '.join(sorted(t.uses[mine])) or 'nothing'})")
    for key in sorted(set(t.allowed) - used_allows):
        errors.append(f"allow {key[0]} {key[1]}: no such include any more; drop the exception")
    errors.extend(cycles(edges))
    return errors


def cycles(edges):
    """Every include cycle between modules, each reported once."""
    found, seen = [], set()
    state = {}  # module -> 1 on the stack, 2 done
    stack = []

    def visit(m):
        state[m] = 1
        stack.append(m)
        for nxt in sorted(edges.get(m, {})):
            if state.get(nxt) == 1:
                loop = stack[stack.index(nxt):] + [nxt]
                key = frozenset(loop)
                if key not in seen:
                    seen.add(key)
                    steps = []
                    for a, b in zip(loop, loop[1:]):
                        f, n, h = edges[a][b]
                        steps.append(f'{f}:{n}: #include "{h}"')
                    found.append("include cycle " + " -> ".join(loop) + ":\n    " + "\n    ".join(steps))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m)
    return found


# The libraries whose objects the call check reads: (folder, libtool
# prefix of their object files).
LIBS = (("src", "libcbbase_la-"), ("src/core", "libcbcore_la-"), ("src", "libcbdaemon_la-"),
        ("client", "libcbclient_la-"))


def call_edges(root, build):
    """module -> {module: symbol}: the calls (and data uses) between modules,
    read from the object files of a build. Objects whose source is gone
    (a stale build) are skipped."""
    defined, used = {}, {}
    for folder, prefix in LIBS:
        d = os.path.join(build, folder)
        if not os.path.isdir(d):
            continue
        for name in sorted(os.listdir(d)):
            if not (name.startswith(prefix) and name.endswith(".o")):
                continue
            mod = os.path.join(folder, name[len(prefix):-2])
            if not os.path.exists(os.path.join(root, mod + ".c")):
                continue
            out = subprocess.run(["nm", os.path.join(d, name)], capture_output=True, text=True,
                                 check=True).stdout
            for line in out.splitlines():
                parts = line.split()
                if len(parts) == 3 and parts[1] in "TDBRG":
                    defined.setdefault(parts[2], set()).add(mod)
                elif len(parts) == 2 and parts[0] == "U":
                    used.setdefault(mod, {})[parts[1]] = True
    edges = {}
    for mod, syms in used.items():
        for sym in sorted(syms):
            for owner in sorted(defined.get(sym, ())):
                if owner != mod:
                    edges.setdefault(mod, {}).setdefault(owner, sym)
    return edges


def check_calls(root, table_path, build):
    t = read_table(table_path)
    errors = []
    edges = call_edges(root, build)
    if not edges:
        return [f"{build}: no object files of the libraries (build first)"]
    flat = {}
    for a, targets in edges.items():
        mine = layer_of(t, a)
        for b, sym in targets.items():
            theirs = layer_of(t, b)
            flat.setdefault(a, {})[b] = (a + ".c", 0, sym)
            if mine is None or theirs is None:
                continue
            if theirs == mine:
                if mine not in t.sideways:
                    errors.append(f"{a}.c calls {sym} ({b}.c): sideways within layer {mine}, "
                                  "which does not allow it")
                continue
            if theirs not in t.uses[mine] and (a + ".c", os.path.basename(b) + ".h") not in t.allowed:
                errors.append(f"{a}.c calls {sym} ({b}.c): from layer {mine} to layer {theirs}")
    for c in cycles(flat):
        errors.append(c.replace("include cycle", "call cycle").replace(':0: #include "', ": uses ")
                      .replace('"', ""))
    return errors


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    build = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("BUILDDIR")
    errors = check(root, os.path.join(root, "src", "LAYERS"))
    if build:
        errors += check_calls(root, os.path.join(root, "src", "LAYERS"), build)
    for e in errors:
        print(e)
    if errors:
        print(f"layering: {len(errors)} problem(s); the table is src/LAYERS")
        return 1
    print("layering: every include%s keeps to src/LAYERS; no cycle" % (" and call" if build else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
