"""The shape of the code: no import cycle among llamaforge's modules, no function over 60 lines (issue 24).

The import graph is read from the source (``ast``) and counts what really runs when a module is imported:

* every ``import``/``from … import`` of a llamaforge module, including function-local ones — a cycle
  hidden behind an import inside a function is still a cycle (issues 13 and 24);
* the implicit import of a package's ``__init__``: importing ``a.b.c`` runs ``a/__init__`` and
  ``a/b/__init__`` first, so the importer depends on those too (``⇒`` in the messages below). A module
  never gets such an edge to a package it is itself inside: Python has started that package before the
  module runs, so it is not a dependency (``from . import x`` inside ``a/b`` does not need ``a/b/__init__``
  to have finished; ``from a.b import X`` inside ``a/b/c.py`` is an explicit edge and still counts).

``if TYPE_CHECKING:`` imports never run, so they cannot close an import cycle and are left out of the
cycle graph; the layering rules below (what ``report/`` may import) count them, because a type named
from a module is a dependency on it all the same.
"""

from __future__ import annotations

import ast
import functools
from collections import deque
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = "llamaforge"
MAX_FUNCTION_LINES = 60
#: functions allowed over MAX_FUNCTION_LINES for now, each with the reason. Keep it empty when you can.
LONG_FUNCTIONS_ALLOWED: frozenset[str] = frozenset()
#: how an edge arose: an import statement, or the implicit import of a package's ``__init__``
EXPLICIT, INIT = "→", "⇒"


def _modules(src: Path = SRC, pkg: str = PKG) -> dict[str, Path]:
    out = {}
    for p in sorted((src / pkg).rglob("*.py")):
        parts = list(p.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


@functools.cache
def _parse_text(text: str, name: str) -> ast.Module:
    return ast.parse(text, name)


def parse(path: Path) -> ast.Module:
    """The module's AST, parsed once per content (the graph, the function lengths and the local-import
    rule all read the same ~200 files; treat the tree as read-only)."""
    return _parse_text(path.read_text(encoding="utf-8"), str(path))


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, *, type_checking: bool = False):
    """Every Import/ImportFrom node that runs (``if TYPE_CHECKING:`` bodies only with ``type_checking``)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom,
             modules: dict[str, Path] | None = None) -> set[str]:
    """The modules ``node`` (in ``module``, file ``path``) names, as keys of ``modules``."""
    modules = MODULES if modules is None else modules
    root = module.split(".")[0]
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.split(".")[0] == root and a.name in modules}
    if node.level:
        base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        origin = ".".join(base + ([node.module] if node.module else []))
    else:
        origin = node.module or ""
    if origin.split(".")[0] != root:
        return set()
    out = set()
    for a in node.names:
        sub = f"{origin}.{a.name}"
        out.add(sub if sub in modules else origin)
    return {t for t in out if t in modules}


def _packages_of(module: str) -> list[str]:
    """The packages whose ``__init__`` runs before ``module``: ``a.b.c`` → ``a``, ``a.b``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(modules: dict[str, Path] | None = None, *,
                 type_checking: bool = False) -> dict[str, dict[str, str]]:
    """module → {module it imports → EXPLICIT or INIT (the implicit import of a package ``__init__``)}."""
    modules = MODULES if modules is None else modules
    graph: dict[str, dict[str, str]] = {}
    for mod, path in modules.items():
        tree = parse(path)
        edges: dict[str, str] = {}
        for node in _imports(tree, type_checking=type_checking):
            for t in _targets(mod, path, node, modules) - {mod}:
                edges[t] = EXPLICIT
                inside = set(_packages_of(mod))
                for pkg in _packages_of(t):
                    if pkg in modules and pkg not in inside and pkg != mod:
                        edges.setdefault(pkg, INIT)
        graph[mod] = edges
    return graph


def cycles(graph) -> list[list[str]]:
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


def _shortest_cycle(graph: dict[str, dict[str, str]], start: str, inside: set[str]) -> list[str]:
    """The shortest import path from ``start`` back to itself within ``inside`` (breadth first)."""
    prev: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v]):
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [start, *reversed(path[:-1]), start] if v != start else [start, start]
            if w in inside and w not in prev:
                prev[w] = v
                queue.append(w)
    return []


def cycle_paths(graph: dict[str, dict[str, str]]) -> list[str]:
    """Every cycle the graph holds, as import paths: the shortest cycle through each module of each
    strongly connected component (each cycle once), e.g. ``a → b ⇒ c → a``."""
    out: list[str] = []
    for comp in cycles(graph):
        seen: set[tuple[str, ...]] = set()
        for start in comp:
            path = _shortest_cycle(graph, start, set(comp))
            ring = path[:-1]
            key = tuple(ring[ring.index(min(ring)):] + ring[:ring.index(min(ring))])
            if key in seen:
                continue
            seen.add(key)
            text = key[0]
            for a, b in zip(key, key[1:] + key[:1], strict=True):
                text += f" {graph[a][b]} {b}"
            out.append(text.replace(f"{PKG}.", ""))
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



def _tree(root: Path, files: dict[str, str], pkg: str = "pkg") -> dict[str, Path]:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return _modules(root, pkg)


def test_a_package_init_is_an_edge_and_the_cycle_is_named_with_its_path(tmp_path):
    """``pkg.a`` imports ``pkg.b.c`` (in a function): that runs ``pkg/b/__init__``, which imports ``pkg.a``.
    No import statement closes the ring; the implicit ``__init__`` edge does."""
    mods = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "def f():\n    from .b.c import x\n",
                            "pkg/b/__init__.py": "from ..a import f\n", "pkg/b/c.py": "x = 1\n"})
    g = import_graph(mods)
    assert g["pkg.a"] == {"pkg.b.c": EXPLICIT, "pkg.b": INIT}
    assert cycles(g) == [["pkg.a", "pkg.b"]]
    assert cycle_paths(g) == [f"pkg.a {INIT} pkg.b {EXPLICIT} pkg.a"]


def test_a_module_has_no_init_edge_to_its_own_package(tmp_path):
    """``pkg/b/__init__`` imports ``pkg.b.c``, which imports its sibling ``pkg.b.d``: Python has started
    ``pkg.b`` before ``c`` runs, so there is no cycle; an explicit ``from pkg.b import …`` is one."""
    mods = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/b/__init__.py": "from .c import x\n",
                            "pkg/b/c.py": "from .d import y\nx = y\n", "pkg/b/d.py": "y = 1\n"})
    assert cycles(import_graph(mods)) == []
    (tmp_path / "pkg/b/d.py").write_text("def f():\n    from pkg.b import x\n")
    assert cycle_paths(import_graph(mods)) == [f"pkg.b {EXPLICIT} pkg.b.c {EXPLICIT} pkg.b.d {EXPLICIT} pkg.b"]


def test_type_checking_imports_are_not_cycle_edges(tmp_path):
    mods = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "from .b import y\n",
                            "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                        "    from .a import X\ny = 1\n"})
    assert cycles(import_graph(mods)) == []
    assert cycles(import_graph(mods, type_checking=True)) == [["pkg.a", "pkg.b"]]


def test_no_import_cycle_among_llamaforge_modules():
    found = cycle_paths(import_graph())
    assert not found, "import cycles (→ import, ⇒ a package __init__ it runs):\n  " + "\n  ".join(found)


def _reaches(graph: dict[str, dict[str, str]], start: str) -> dict[str, str]:
    """Every module ``start`` loads, directly or not → the module that imports it (for the message)."""
    seen: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in graph.get(v, ()):
            if w not in seen and w != start:
                seen[w] = v
                queue.append(w)
    return seen


def _under(mod: str, names: tuple[str, ...]) -> bool:
    return any(mod == f"{PKG}.{n}" or mod.startswith(f"{PKG}.{n}.") for n in names)


#: the llama.cpp adapter floor: speaks to llama.cpp's binaries, sits on the foundations only
FLOOR = "llamacpp"
#: what the floor may load (itself included): the foundations it stands on
FLOOR_MAY_LOAD = (FLOOR, "proc", "errors", "files", "console", "redact", "visible", "lazy")


def test_the_llamacpp_floor_loads_only_foundations():
    """Issue 24: ``llamacpp/`` owns what speaks to llama.cpp (argv and ``--help``, the server session,
    llama-bench output, quirks, devices); builds/verify, smoke, bench/engines and variants depend downward
    on it, and importing any module of it — everything it loads, ``__init__``s included — loads no bench,
    builds, smoke, variants or report module."""
    graph = import_graph(type_checking=True)
    floor = [m for m in MODULES if _under(m, (FLOOR,))]
    assert floor, "no llamacpp package"
    bad = sorted(f"{m.removeprefix(PKG + '.')} loads {t.removeprefix(PKG + '.')} "
                 f"(imported by {via.removeprefix(PKG + '.')})"
                 for m in floor for t, via in _reaches(graph, m).items()
                 if t != PKG and not _under(t, FLOOR_MAY_LOAD))
    assert not bad, "the llamacpp floor climbs up: " + "; ".join(bad)


def test_smoke_and_verify_do_not_climb_into_bench():
    """The smoke run (and so build verification) speaks to llama.cpp through the floor, not through the bench."""
    graph = import_graph(type_checking=True)
    bad = sorted(f"{m} loads {t} (imported by {via})" for m in (f"{PKG}.builds.smoke", f"{PKG}.builds.verify")
                 for t, via in _reaches(graph, m).items() if _under(t, ("bench", "variants", "report")))
    assert not bad, "; ".join(bad)


#: the pure halves of the features: what the judge says about a stored compare run (``fleet compare`` reads it
#: without the session). The verdict on a re-run is :mod:`llamaforge.findings.reproduction` (issue 42).
PURE_FEATURE_PARTS = ("compare.judged",)
#: what ``report/`` may import (every edge: local, ``TYPE_CHECKING``, a package ``__init__`` it runs): records, the
#: judge (its trend rule included), what stored runs say (``findings/``), the variant matrix's pure readers, the
#: backends' declarations (labels, order, colours: ``backends/``, a floor) and formatting foundations — no feature package (issue 42: no exception for a feature's "pure half")
REPORT_MAY_IMPORT = ("report", "records", "store", "judge", "findings", "variants.model",
                     "variants.status", "variants.took", "errors", "console", "files", "mdtext", "visible", "metrics",
                     "machine", "backends")
#: the feature packages ``report/`` never loads, directly or not — not even their ``__init__``
REPORT_NEVER_LOADS = ("reproduce", "compare", "bisect", "history", "fleet", "bench", "builds", "commands", "cli")
#: modules that measure, build, fetch or start processes: nothing the report, ``findings/`` or a pure feature part
#: loads, directly or not (``compare/`` and ``reproduce/`` have ``__init__``s that import nothing, so their pure
#: halves load without their measuring halves)
MEASURING = ("bench", "builds", "bisect", "compare.session", "reproduce.remeasure", "history.run", "history.bisect_steps",
             "fleet", "sources", "models",
             "commands", "cli", "hostlock", "locks", "llamacpp.server", "llamacpp.options", "variants.build",
             "variants.check")


def _is_package(mod: str, modules: dict[str, Path] | None = None) -> bool:
    return (MODULES if modules is None else modules)[mod].name == "__init__.py"


def report_imports_outside(graph: dict[str, dict[str, str]], modules: dict[str, Path] | None = None) -> list[str]:
    """``report.x → y`` for every import of ``report/`` outside :data:`REPORT_MAY_IMPORT` (a package whose
    ``__init__`` imports nothing, such as ``variants``, is fine to pass through)."""
    return sorted(f"{m.removeprefix(PKG + '.')} {kind} {t.removeprefix(PKG + '.')}"
                  for m in graph if _under(m, ("report",)) for t, kind in graph[m].items()
                  if t != PKG and not _under(t, REPORT_MAY_IMPORT)
                  and not (kind == INIT and _is_package(t, modules) and not graph[t]))


def features_loaded_by_report(graph: dict[str, dict[str, str]]) -> list[str]:
    """``report.x loads y (imported by z)`` for every module of :data:`REPORT_NEVER_LOADS` that ``report/`` loads."""
    return sorted(f"{m.removeprefix(PKG + '.')} loads {t.removeprefix(PKG + '.')} (imported by {v.removeprefix(PKG + '.')})"
                  for m in graph if _under(m, ("report",)) for t, v in _reaches(graph, m).items()
                  if _under(t, REPORT_NEVER_LOADS))


def measuring_loaded_by(graph: dict[str, dict[str, str]], roots: tuple[str, ...]) -> list[str]:
    """``a loads b (imported by c)`` for every measuring module a module under ``roots`` loads."""
    return sorted(f"{m.removeprefix(PKG + '.')} loads {t.removeprefix(PKG + '.')} (imported by {v.removeprefix(PKG + '.')})"
                  for m in graph if _under(m, roots) for t, v in _reaches(graph, m).items() if _under(t, MEASURING))


def test_the_report_rule_sees_a_measuring_import(tmp_path):
    """A report module that imports a measuring module, even inside a function, breaks both rules."""
    graph = import_graph(type_checking=True)
    graph[f"{PKG}.report.data"] = {**graph[f"{PKG}.report.data"], f"{PKG}.reproduce.remeasure": EXPLICIT}
    assert "report.data → reproduce.remeasure" in report_imports_outside(graph)
    assert any(x.startswith("report.data loads reproduce.remeasure") for x in measuring_loaded_by(graph, ("report",)))


def test_the_report_imports_only_records_the_judge_trend_and_formatting():
    """Issue 24: ``report/`` is a pure function of stored data. It imports only records, the store, the judge
    (and its trend rule), ``findings/`` and the pure feature parts (what stored runs say, shared with the
    terminal) and formatting — never a measuring module (``reproduce.remeasure``, ``compare.session``,
    ``bench.adaptive``, ``bench.schedule``, the sweep …), and nothing it loads is one."""
    graph = import_graph(type_checking=True)
    assert not report_imports_outside(graph), "report/ imports: " + "; ".join(report_imports_outside(graph))
    features = features_loaded_by_report(graph)
    assert not features, "report/ loads feature packages (move what it needs to findings/ or the judge): " + "; ".join(
        features)
    found = measuring_loaded_by(graph, ("report", "findings", "judge", *PURE_FEATURE_PARTS))
    assert not found, "measuring modules loaded by report/, findings/, judge/ or a pure feature part: " + "; ".join(found)


#: a miniature llamaforge for the planted-import tests below: a report module, the store, findings/, reproduce/
_MINI = {f"{PKG}/__init__.py": "", f"{PKG}/store.py": "Store = 1\n", f"{PKG}/report/__init__.py": "",
         f"{PKG}/findings/__init__.py": "", f"{PKG}/findings/labels.py": "x = 1\n",
         f"{PKG}/findings/reproduction.py": "def verdict_for():\n    return 1\n",
         f"{PKG}/reproduce/__init__.py": "", f"{PKG}/reproduce/verdict.py": "def verdict_for():\n    return 1\n",
         f"{PKG}/bench/__init__.py": "", f"{PKG}/bench/sweep.py": "y = 1\n"}


def test_a_planted_function_level_upward_import_in_the_report_fails_the_rules(tmp_path):
    """Issue 42: the rules read the source, so an upward import hidden inside a function (as
    ``report/data.py`` once imported ``reproduce.verdict``) is an edge like any other and fails them; the same
    report reading the verdict from ``findings/`` passes."""
    hidden = ("from ..store import Store\n\n\ndef reproductions():\n"
              "    from ..reproduce.verdict import verdict_for\n    return verdict_for()\n")
    mods = _tree(tmp_path, {**_MINI, f"{PKG}/report/data.py": hidden}, PKG)
    graph = import_graph(mods, type_checking=True)
    assert report_imports_outside(graph, mods) == ["report.data → reproduce.verdict"]
    assert features_loaded_by_report(graph) == ["report.data loads reproduce (imported by report.data)",
                                                "report.data loads reproduce.verdict (imported by report.data)"]
    (tmp_path / PKG / "report" / "data.py").write_text(
        "from ..findings.reproduction import verdict_for\nfrom ..store import Store\n")
    graph = import_graph(mods, type_checking=True)
    assert report_imports_outside(graph, mods) == [] and features_loaded_by_report(graph) == []


def test_a_planted_upward_import_in_a_package_init_fails_the_rules(tmp_path):
    """A package ``__init__`` runs before any module of it: ``findings/__init__`` importing the sweep (even inside a
    function) makes every report module that reads ``findings/`` load the sweep, and the rules name the path."""
    init = "def late():\n    from ..bench.sweep import y\n    return y\n"
    mods = _tree(tmp_path, {**_MINI, f"{PKG}/findings/__init__.py": init,
                            f"{PKG}/report/data.py": "from ..findings.labels import x\n"}, PKG)
    graph = import_graph(mods, type_checking=True)
    assert graph[f"{PKG}.report.data"][f"{PKG}.findings"] == INIT
    assert "report.data loads bench.sweep (imported by findings)" in measuring_loaded_by(graph, ("report",))
    assert "findings loads bench.sweep (imported by findings)" in measuring_loaded_by(graph, ("findings",))
    assert "report.data loads bench (imported by findings)" in features_loaded_by_report(graph)


def test_a_feature_package_init_that_imports_its_session_makes_its_pure_part_measuring():
    """``compare/__init__`` must stay empty: if it imported the session, loading ``compare.judged`` (as the
    report may) would run the session's module too."""
    graph = import_graph(type_checking=True)
    graph[f"{PKG}.compare"] = {**graph[f"{PKG}.compare"], f"{PKG}.compare.session": EXPLICIT}
    graph[f"{PKG}.report.data"] = {**graph[f"{PKG}.report.data"], f"{PKG}.compare.judged": EXPLICIT,
                                  f"{PKG}.compare": INIT}
    assert any(x.startswith("report.data loads compare.session") for x in measuring_loaded_by(graph, ("report",)))


#: the top level of ``src/llamaforge``: foundations — no llamaforge feature, used everywhere, loading no package —
#: and the two entry points. Every feature lives in a package (``compare/``, ``reproduce/``, ``builds/`` …);
#: a new top-level module is either one more foundation (add it here and to docs/architecture.md) or a
#: feature that belongs in a package.
FOUNDATIONS = frozenset({"errors", "redact", "visible", "console", "mdtext", "pathsafe", "paths", "files", "proc",
                         "locks", "hostlock", "values", "metrics", "gpu", "machine", "envinfo", "config", "records",
                         "store", "invoke_help", "lazy", "workspace"})
#: the programs: they load every command (``cli``: the collection and ``llamaforge``; ``__main__``: ``python -m``)
ENTRY_POINTS = frozenset({"cli", "__main__"})


def top_level_modules(src: Path = SRC, pkg: str = PKG) -> set[str]:
    """The modules directly in ``src/pkg`` (``__init__`` aside), by name."""
    return {p.stem for p in (src / pkg).glob("*.py") if p.stem != "__init__"}


def foundations_loading_packages(graph: dict[str, dict[str, str]], foundations: frozenset[str] = FOUNDATIONS,
                                 pkg: str = PKG) -> list[str]:
    """``a loads b (imported by c)`` for every module a foundation loads that is not a foundation."""
    def name(m: str) -> str:
        return m.removeprefix(pkg + ".")
    return sorted(f"{f} loads {name(t)} (imported by {name(via)})" for f in foundations if f"{pkg}.{f}" in graph
                  for t, via in _reaches(graph, f"{pkg}.{f}").items() if t != pkg and name(t) not in foundations)


def test_the_top_level_finder_sees_a_new_feature_module_and_a_climbing_foundation(tmp_path):
    mods = _tree(tmp_path, {"pkg/__init__.py": "", "pkg/errors.py": "from .feature import x\n",
                            "pkg/feature.py": "from .sub.deep import y\nx = y\n", "pkg/sub/__init__.py": "",
                            "pkg/sub/deep.py": "y = 1\n"})
    assert top_level_modules(tmp_path, "pkg") - {"errors"} == {"feature"}
    found = foundations_loading_packages(import_graph(mods), frozenset({"errors"}), "pkg")
    assert found == ["errors loads feature (imported by errors)", "errors loads sub (imported by feature)",
                     "errors loads sub.deep (imported by feature)"]


def test_the_top_level_holds_only_foundations_and_the_entry_points():
    """Issue 24: the top level no longer mixes foundations (errors, paths, proc …) with features (compare,
    reproduce, smoke …): a feature module there is named here, with where features go."""
    top = top_level_modules()
    extra = sorted(top - FOUNDATIONS - ENTRY_POINTS)
    assert not extra, (f"top-level modules that are neither foundations nor entry points: {extra} — put a feature in "
                       "its package (or, for a true foundation, add it to FOUNDATIONS and to docs/architecture.md)")
    stale = sorted((FOUNDATIONS | ENTRY_POINTS) - top)
    assert not stale, f"FOUNDATIONS/ENTRY_POINTS name modules that are gone: {stale}"


def test_the_foundations_load_only_foundations():
    """A foundation never loads a feature package (``if TYPE_CHECKING:`` and function-local imports count)."""
    found = foundations_loading_packages(import_graph(type_checking=True))
    assert not found, "foundations that climb into features: " + "; ".join(found)


def long_functions(modules: dict[str, Path] | None = None, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``module.function`` → its length in lines (decorators not counted), for every function or
    method in ``modules`` longer than ``limit`` lines."""
    out = {}
    for mod, path in (MODULES if modules is None else modules).items():
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    out[f"{mod}.{node.name}"] = n
    return out


def _long_functions() -> list[str]:
    return [f"{name} ({n} lines)" for name, n in long_functions().items()]


def test_the_long_function_finder_counts_lines(tmp_path):
    def body(n: int, indent: str) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(n))
    (tmp_path / PKG).mkdir()
    (tmp_path / PKG / "m.py").write_text(
        f"def just_fits():\n{body(MAX_FUNCTION_LINES - 1, '    ')}\n\n"
        f"class C:\n    def one_too_many(self):\n{body(MAX_FUNCTION_LINES, '        ')}")
    assert long_functions(_modules(tmp_path)) == {f"{PKG}.m.one_too_many": MAX_FUNCTION_LINES + 1}


def test_no_function_is_longer_than_60_lines():
    found = {name: n for name, n in long_functions().items() if name not in LONG_FUNCTIONS_ALLOWED}
    assert not found, "split: " + ", ".join(f"{name} ({n} lines)" for name, n in found.items())


def test_the_long_function_allow_list_holds_only_long_functions():
    """An allowed name that is no longer long (or no longer exists) must leave the list."""
    stale = LONG_FUNCTIONS_ALLOWED - set(long_functions())
    assert not stale, "remove from LONG_FUNCTIONS_ALLOWED: " + ", ".join(sorted(stale))


if __name__ == "__main__":  # pragma: no cover - a map for humans
    for c in cycle_paths(import_graph()):
        print("cycle:", c)
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
    for fn in ast.walk(_parse_text(text, str(path))):
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


#: the backend floor: one object per backend (``backends/``), standing on the foundations and the llama.cpp floor
BACKENDS_PKG = "backends"
BACKENDS_MAY_LOAD = (BACKENDS_PKG, *FLOOR_MAY_LOAD, FLOOR, "paths", "gpu", "config", "values", "pathsafe",
                     "workspace")


def test_the_backends_floor_loads_only_foundations_and_the_llamacpp_floor():
    """Issue 42: ``backends/`` declares what differs per backend; builds, verify, doctor, bench and the report ask
    it. Importing it — everything it loads, ``__init__``s and ``TYPE_CHECKING`` names included — loads no builds,
    bench, variants or report module, so the report may read a backend's label, order and colour."""
    graph = import_graph(type_checking=True)
    mods = [m for m in MODULES if _under(m, (BACKENDS_PKG,))]
    assert mods, "no backends package"
    bad = sorted(f"{m.removeprefix(PKG + '.')} loads {t.removeprefix(PKG + '.')} (imported by {via.removeprefix(PKG + '.')})"
                 for m in mods for t, via in _reaches(graph, m).items()
                 if t != PKG and not _under(t, BACKENDS_MAY_LOAD))
    assert not bad, "the backends floor climbs up: " + "; ".join(bad)


def _backend_names() -> frozenset[str]:
    from llamaforge import backends

    # "rocm": llama.cpp's name for what llamaforge calls hip (a table once listed it as a backend of its own)
    return frozenset({*backends.names(), "rocm"})


def _names_in(node: ast.AST, names: frozenset[str]) -> bool:
    """``node`` is a backend name (a string constant, any case), or a tuple/list/set of nothing but backend names."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value.strip().lower() in names
    if isinstance(node, ast.Tuple | ast.List | ast.Set) and node.elts:
        return all(_names_in(e, names) for e in node.elts)
    return False


def _pattern_names(pattern: ast.pattern, names: frozenset[str]) -> bool:
    if isinstance(pattern, ast.MatchValue):
        return _names_in(pattern.value, names)
    if isinstance(pattern, ast.MatchOr):
        return any(_pattern_names(p, names) for p in pattern.patterns)
    if isinstance(pattern, ast.MatchAs) and pattern.pattern is not None:
        return _pattern_names(pattern.pattern, names)
    return False


def backend_name_comparisons(tree: ast.AST, names: frozenset[str] | None = None) -> list[int]:
    """Lines where ``tree`` compares something with a backend's name: ``x == "cuda"``, ``b in ("cuda", "vulkan")``,
    ``"vulkan" in caps``, ``name != "cpu"``, ``case "cuda":``. Only ``backends/`` may: elsewhere the code asks the
    backend object (``backends.get(name).offloads``, ``.device_kind``, ``.cmake_flags(…)``)."""
    names = _backend_names() if names is None else names
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_names_in(side, names) for side in (node.left, *node.comparators)):
            out.add(node.lineno)
        elif isinstance(node, ast.match_case) and _pattern_names(node.pattern, names):
            out.add(node.pattern.lineno)
    return sorted(out)


@pytest.mark.parametrize("code", ['if backend == "cuda":\n    pass\n', 'ok = build.backend != "Vulkan"\n',
                                  'if b in ("cuda", "vulkan"):\n    pass\n', 'x = "cpu" == name\n',
                                  'match name:\n    case "metal" | "sycl":\n        pass\n'])
def test_the_backend_name_finder_sees_a_planted_comparison(code: str, tmp_path: Path):
    """Issue 42's acceptance: a planted ``if backend == "cuda"`` outside ``backends/`` is found (and so fails
    :func:`test_no_backend_name_is_compared_outside_the_backends_package`)."""
    planted = tmp_path / "planted.py"
    planted.write_text("def f(backend, build, b, name):\n" + "".join(f"    {ln}\n" for ln in code.splitlines()))
    assert backend_name_comparisons(ast.parse(planted.read_text())), code


def test_the_backend_name_finder_leaves_other_comparisons_alone():
    """Capability keys among other keys and other strings are not backend names."""
    code = ('k not in ("devices", "cuda_archs", "vulkan")\nkind == "gpu"\nb.offloads\n'
            'match x:\n    case "fitted":\n        pass\n')
    assert backend_name_comparisons(ast.parse(code)) == []


def test_no_backend_name_is_compared_outside_the_backends_package():
    """Issue 42, deliverable 3: every backend's knowledge is its own object's (``src/llamaforge/backends/``); no
    module elsewhere branches on a backend's name."""
    found = [f"{path.relative_to(SRC)}:{n}" for mod, path in MODULES.items() if not _under(mod, (BACKENDS_PKG,))
             for n in backend_name_comparisons(parse(path))]
    assert not found, ("backend names compared outside backends/ (ask the backend object instead: "
                       "llamaforge.backends.get(name)): " + ", ".join(found))
