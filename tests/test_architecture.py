"""Checks on the shape of the code (docs/ARCHITECTURE.md), read from the source with ``ast``, never imported.

* no import cycle inside ``replay_harness`` and ``replay_kernels`` (imports at any depth: module level,
  inside functions, under ``try`` / ``if``; absolute and relative);
* every module of both packages stays under :data:`MAX_LINES` lines;
* outside ``replay_harness/cli/`` no module imports typer or rich.console at module level, so the library
  imports without the command line;
* the tree in docs/ARCHITECTURE.md names every module and package, and nothing that does not exist.

The import graph
----------------
Nodes are the modules of both packages (``pkg/__init__.py`` is the node ``pkg``). Module ``M`` has an
edge to ``T`` for every statement of ``M`` that imports ``T``:

* ``import a.b.c`` and ``from a.b.c import x``: ``T = a.b.c``; for ``from a.b import c`` where ``a.b.c`` is a
  module, ``T = a.b.c`` (otherwise ``c`` is a name defined in ``a.b``, and ``T = a.b``);
* relative imports (``from .x import y``, ``from .. import z``) are resolved against ``M``'s package.

Parent packages: importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first, so ``M`` also gets an
edge to every ancestor package of ``T``, EXCEPT the ancestors of ``M`` itself: Python initialises those
before ``M``'s body runs, so importing them again runs nothing new (and counting them would flag every
package whose ``__init__`` imports its own submodules, e.g. the impl registry ``impls/__init__`` importing
``impls.contract``, which is no cycle at run time). No special case is needed for trivial ``__init__``
files: one that imports nothing of the packages has no outgoing edge and cannot close a cycle. An
explicit import of one's own package (``from replay_harness.impls import get_impl`` inside
``replay_harness/impls/``) is an ordinary edge and does count.

Not counted: imports spelled as strings (``importlib.import_module``, the ``"module:attr"`` targets of
the impl registry's BUILTIN table and entry points). Those are the plug-in mechanism: the registry finds
impls by name at run time, and an impl necessarily imports the contract from the registry's package.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("replay_harness", "replay_kernels")
MAX_LINES = 450  # issue 11: "keep modules under about 400 lines"
CLI_PACKAGE = "replay_harness.cli"
CLI_ONLY_IMPORTS = ("typer", "rich.console")


def discover(root: Path = REPO, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _ancestors(name: str) -> list[str]:
    """``a.b.c`` -> ``["a", "a.b"]``."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def imports_of(name: str, source: str, known: set[str], is_package: bool = False) -> set[str]:
    """The modules in ``known`` that module ``name`` imports, at any depth of its source (see module doc).

    ``is_package``: ``name`` is a package's ``__init__`` (relative imports then resolve inside it).
    """
    package = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:  # a submodule, else a name defined in (the __init__ of) base
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    own_ancestors = set(_ancestors(name))
    edges = set()
    for target in targets:
        if target in known:
            edges.add(target)
        edges.update(p for p in _ancestors(target) if p in known and p not in own_ancestors)
    edges.discard(name)
    return edges


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    known = set(modules)
    return {name: imports_of(name, path.read_text(), known, is_package=path.name == "__init__.py")
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[m0, m1, ..., m0]``, or None when it has none (iterative DFS)."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = {node: WHITE for node in graph}
    for root in sorted(graph):
        if colour[root] != WHITE:
            continue
        path = [root]
        stack = [iter(sorted(graph[root]))]
        colour[root] = GREY
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = BLACK
                stack.pop()
            elif colour.get(nxt, BLACK) == GREY:
                return path[path.index(nxt):] + [nxt]
            elif colour.get(nxt, BLACK) == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


# --- the checks on the tree --------------------------------------------------------------------------

def test_no_import_cycle():
    cycle = find_cycle(import_graph(discover()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_modules_stay_small():
    too_long = {name: n for name, path in discover().items()
                if (n := len(path.read_text().splitlines())) >= MAX_LINES}
    assert not too_long, f"modules of {MAX_LINES} lines or more (split them by job): {too_long}"


def _import_time_imports(tree: ast.AST):
    """The import statements a module runs when imported: all but those inside functions."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _import_time_imports(node)


def test_library_imports_without_the_cli():
    offenders = []
    for name, path in discover().items():
        if name == CLI_PACKAGE or name.startswith(CLI_PACKAGE + "."):
            continue
        for stmt in _import_time_imports(ast.parse(path.read_text())):
            if isinstance(stmt, ast.ImportFrom) and stmt.level:
                continue
            mods = [a.name for a in stmt.names] if isinstance(stmt, ast.Import) else [stmt.module or ""]
            offenders += [f"{name}: {m}" for m in mods
                          if any(m == c or m.startswith(c + ".") for c in CLI_ONLY_IMPORTS)]
    assert not offenders, f"CLI-only imports at import time outside {CLI_PACKAGE}: {offenders}"


# --- the checkers themselves -------------------------------------------------------------------------

@pytest.mark.parametrize("graph, has_cycle", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
    ({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}, False),  # diamond: shared, not cyclic
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
    ({"x": set(), "a": {"b"}, "b": {"a"}}, True),
    ({"a": {"a"}}, True),
])
def test_find_cycle(graph, has_cycle):
    cycle = find_cycle(graph)
    assert (cycle is not None) == has_cycle
    if cycle:
        assert cycle[0] == cycle[-1] and all(b in graph[a] for a, b in zip(cycle, cycle[1:]))


KNOWN = {"p", "p.a", "p.b", "p.sub", "p.sub.c", "p.sub.d", "q", "q.e"}


@pytest.mark.parametrize("name, is_package, source, expected", [
    ("p.a", False, "import p.b", {"p.b"}),
    ("p.a", False, "def f():\n    from p.b import thing", {"p.b"}),  # function level
    ("p.a", False, "try:\n    import q.e\nexcept ImportError:\n    pass", {"q.e", "q"}),  # q/__init__ runs first
    ("p.a", False, "from p import b", {"p.b"}),  # a submodule named in `from`
    ("p.a", False, "from p import name_in_init", {"p"}),  # an explicit import of one's own package counts
    ("p.a", False, "from .sub import c", {"p.sub.c", "p.sub"}),
    ("p.sub.c", False, "from . import d", {"p.sub.d"}),  # p.sub is c's own ancestor: no implicit edge
    ("p.sub.c", False, "from ..b import x", {"p.b"}),
    ("p.sub", True, "from .c import x\nfrom . import d", {"p.sub.c", "p.sub.d"}),
    ("p.a", False, "import os\nfrom typing import Any", set()),
])
def test_imports_of(name, is_package, source, expected):
    assert imports_of(name, source, KNOWN, is_package) == expected


def test_cycle_through_function_level_import_is_found():
    sources = {"p.a": "def f():\n    from p.sub.c import g", "p.sub.c": "from p.a import f",
               "p": "", "p.sub": ""}
    graph = {n: imports_of(n, s, set(sources), is_package=n in ("p", "p.sub")) for n, s in sources.items()}
    assert find_cycle(graph) in (["p.a", "p.sub.c", "p.a"], ["p.sub.c", "p.a", "p.sub.c"])


def test_cycle_through_a_package_init_is_found():
    # p.a imports p.sub.c, which runs p/sub/__init__ first, which imports p.a back.
    sources = {"p.a": "import p.sub.c", "p.sub": "from p.a import f", "p.sub.c": "", "p": ""}
    graph = {n: imports_of(n, s, set(sources), is_package=n in ("p", "p.sub")) for n, s in sources.items()}
    assert find_cycle(graph) is not None


def documented_modules(doc: Path = REPO / "docs" / "ARCHITECTURE.md") -> set[str]:
    """The file paths the tree block of docs/ARCHITECTURE.md names (two spaces of indent per level; the
    names that open a line, ``dir/`` or ``x.py``, before its description)."""
    text = doc.read_text()
    block = text.split("## The tree", 1)[1].split("```", 2)[1]
    paths, stack = set(), []
    for line in block.splitlines():
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip())) // 2
        del stack[depth:]
        for token in line.split():
            if token.endswith("/"):
                stack.append(token.rstrip("/"))
                paths.add("/".join(stack))
                break
            if not token.endswith(".py"):
                break
            paths.add("/".join(stack + [token]))
    return paths


def test_architecture_doc_lists_every_module():
    files = [p.relative_to(REPO) for p in discover().values()]
    actual = {p.as_posix() for p in files} | {p.parent.as_posix() for p in files}
    documented = documented_modules()
    missing = sorted(p for p in actual - documented if not p.endswith("__init__.py"))
    stale = sorted(documented - actual)
    assert not missing, f"docs/ARCHITECTURE.md, the tree: add a line for each of {missing}"
    assert not stale, f"docs/ARCHITECTURE.md, the tree: names modules that do not exist: {stale}"
