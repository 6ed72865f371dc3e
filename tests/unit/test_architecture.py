"""The shape of the code: no import cycle among llamaforge's modules, no function over 80 lines.

Imports are read from the source (``ast``), including function-local ones — a cycle hidden behind
an import inside a function is still a cycle (issue 13). ``if TYPE_CHECKING:`` imports do not run
and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = "llamaforge"
MAX_FUNCTION_LINES = 80


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted((SRC / PKG).rglob("*.py")):
        parts = list(p.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node that runs (skips ``if TYPE_CHECKING:`` bodies)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.split(".")[0] == PKG and a.name in MODULES}
    if node.level:
        base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    if origin.split(".")[0] != PKG:
        return set()
    out = set()
    for a in node.names:
        sub = f"{origin}.{a.name}"
        out.add(sub if sub in MODULES else origin)
    return {t for t in out if t in MODULES}


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for mod, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        graph[mod] = set()
        for node in _imports(tree):
            graph[mod] |= _targets(mod, path, node) - {mod}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_hidden_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_function_local_imports_are_edges():
    tree = ast.parse("def f():\n    from .b import x\n")
    mod = f"{PKG}.records"
    edges = {t for n in _imports(tree) for t in _targets(mod, MODULES[mod], n)}
    assert edges == set() or edges <= set(MODULES)   # ``.b`` does not exist: no edge, no crash
    tree = ast.parse("def f():\n    from .store import Store\n")
    assert {t for n in _imports(tree) for t in _targets(mod, MODULES[mod], n)} == {f"{PKG}.store"}



def test_no_import_cycle_among_llamaforge_modules():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def _long_functions() -> list[str]:
    out = []
    for mod, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    out.append(f"{mod}.{node.name} ({n} lines)")
    return out


def test_no_function_is_longer_than_80_lines():
    assert not _long_functions(), "split: " + ", ".join(_long_functions())


if __name__ == "__main__":  # pragma: no cover - a map for humans
    for c in cycles(import_graph()):
        print("cycle:", " <-> ".join(c))
    print("\n".join(_long_functions()))
    pytest.main([__file__, "-q"])


#: the word a comment beside a function-local import of our own modules must hold (why it is local)
LOCAL_IMPORT_REASON = "start-up"


def unexplained_local_imports(mod: str, path: Path) -> list[int]:
    """Lines of function-local imports of llamaforge modules in ``path`` (module ``mod``) with no
    comment naming the start-up cost on that line or the line above."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    out = []
    for fn in ast.walk(ast.parse(text, str(path))):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in _imports(fn):
            near = " ".join(lines[max(0, node.lineno - 2):node.lineno])
            if _targets(mod, path, node) and LOCAL_IMPORT_REASON not in near:
                out.append(node.lineno)
    return sorted(set(out))


def test_the_local_import_finder_sees_an_unexplained_one(tmp_path):
    mod = f"{PKG}.bench.sweep"          # resolved as if the text were that module
    path = tmp_path / "sweep.py"
    path.write_text("def f():\n    from ..store import Store\n\n\ndef g():\n"
                    f"    # {LOCAL_IMPORT_REASON}: models pulls in gguf\n    from ..store import Point\n"
                    "\n\ndef h():\n    import json\n")
    assert unexplained_local_imports(mod, path) == [2]


def test_bench_has_no_unexplained_function_local_imports():
    """Issue 13: the bench package imports its own modules at the top; a local import is allowed only
    where start-up time needs it, and says so."""
    pkg = f"{PKG}.bench"
    found = [f"{path.relative_to(SRC)}:{n}" for mod, path in MODULES.items()
             if mod == pkg or mod.startswith(pkg + ".") for n in unexplained_local_imports(mod, path)]
    assert not found, "function-local imports without a start-up reason: " + ", ".join(found)
