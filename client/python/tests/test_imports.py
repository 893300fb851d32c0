# SPDX-License-Identifier: Apache-2.0
"""test_imports.py — cbdclient's modules import each other without a
cycle (issue 21: cache.py and connection.py used to, through the line
codec now in protocol.py). The graph is read from the sources' relative
imports, those inside functions included (a lazy import is an edge too):
``from .x import ...``, ``from . import x, y`` and ``from .x.y import``.
The checker is shown to find a cycle in a synthetic package."""

from __future__ import annotations

import ast
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(os.path.dirname(HERE), "src", "cbdclient")


def import_graph(package_dir: str) -> dict[str, set[str]]:
    """{module: {modules of the package it imports}} for every .py file of
    package_dir (``__init__`` included: it imports the package's API)."""
    modules = {f[:-3] for f in os.listdir(package_dir) if f.endswith(".py")}
    graph: dict[str, set[str]] = {}
    for mod in sorted(modules):
        with open(os.path.join(package_dir, mod + ".py"), encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=mod + ".py")
        edges: set[str] = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.level != 1:
                continue  # absolute imports: the standard library
            if node.module:  # from .x import a, b
                edges.add(node.module.split(".")[0])
            else:  # from . import x, y
                edges.update(alias.name for alias in node.names)
        graph[mod] = {m for m in edges if m in modules and m != mod}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = {m: WHITE for m in graph}
    path: list[str] = []

    def visit(m: str) -> list[str] | None:
        colour[m] = GREY
        path.append(m)
        for n in sorted(graph.get(m, ())):
            if colour.get(n, WHITE) == GREY:
                return path[path.index(n):] + [n]
            if colour.get(n, WHITE) == WHITE:
                found = visit(n)
                if found:
                    return found
        path.pop()
        colour[m] = BLACK
        return None

    for m in sorted(graph):
        if colour[m] == WHITE:
            found = visit(m)
            if found:
                return found
    return None


def test_cbdclient_imports_form_no_cycle():
    graph = import_graph(PACKAGE)
    # The graph was read: the modules are there and import each other.
    assert {"protocol", "connection", "cache", "aio", "breaker"} <= set(graph)
    assert "protocol" in graph["cache"] and "protocol" in graph["connection"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle among cbdclient's modules: " + " -> ".join(cycle)


def test_protocol_is_below_the_connections():
    """The codec imports nothing of the package but errors."""
    assert import_graph(PACKAGE)["protocol"] <= {"errors"}


def test_checker_finds_a_cycle(tmp_path):
    """A synthetic package: a -> b at the top, b -> a inside a function
    (a lazy import, as connection.py's cache_stats once had); c -> a."""
    (tmp_path / "__init__.py").write_text("from .a import A\n")
    (tmp_path / "a.py").write_text("from .b import B\nimport json\nA = 1\n")
    (tmp_path / "b.py").write_text("B = 2\n\ndef f():\n    from . import a\n    return a.A\n")
    (tmp_path / "c.py").write_text("from .a import A\n")
    graph = import_graph(str(tmp_path))
    assert graph == {"__init__": {"a"}, "a": {"b"}, "b": {"a"}, "c": {"a"}}
    assert find_cycle(graph) == ["a", "b", "a"]
    # Without the lazy import the same package is acyclic.
    (tmp_path / "b.py").write_text("B = 2\n")
    assert find_cycle(import_graph(str(tmp_path))) is None


@pytest.mark.parametrize("graph,cycle", [
    ({"x": {"x"}}, ["x", "x"]),
    ({"x": {"y"}, "y": {"z"}, "z": {"x"}}, ["x", "y", "z", "x"]),
    ({"x": {"y", "z"}, "y": {"z"}, "z": set()}, None),
])
def test_find_cycle(graph, cycle):
    assert find_cycle(graph) == cycle
