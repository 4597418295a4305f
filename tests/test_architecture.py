"""Clean edges: no import cycles, no private names across modules, one errors module.

Read from the source with ``ast`` (nothing is imported): every ``import`` and
``from ... import`` of an ``npt_dask`` module counts, at module level or inside
a function, except under ``if TYPE_CHECKING:`` (annotations only).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "npt_dask"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for n in ast.walk(node)}
    return skip


def _imports(name: str) -> list[tuple[str, list[str]]]:
    """``(module imported, names taken from it)`` for every npt_dask import of ``name``."""
    tree = ast.parse(MODULES[name].read_text())
    skip = _type_checking_nodes(tree)
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names if a.name.startswith("npt_dask")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            if not base.startswith("npt_dask"):
                continue
            names = [a.name for a in node.names]
            subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in MODULES]
            out += [(s, []) for s in subs]
            out.append((base, [n for n in names if f"{base}.{n}" not in MODULES]))
    return out


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name in MODULES:
        targets = set()
        for target, _ in _imports(name):
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            # a package's __init__ importing its own submodules is not a cycle of logic
            if node.startswith(nxt + ".") and (MODULES[nxt].name == "__init__.py"):
                continue
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycles():
    graph = _graph()
    # packages re-export their submodules: drop the edges from a package to its own children
    for name in graph:
        if MODULES[name].name == "__init__.py":
            graph[name] = {t for t in graph[name] if not t.startswith(name + ".")}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_check_can_fail():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_private_name_imported_across_modules():
    offenders = []
    for name in MODULES:
        for target, names in _imports(name):
            private = [n for n in names if n.startswith("_") and n != "__version__"]
            if private and target != name:
                offenders.append(f"{name} imports {private} from {target}")
    assert not offenders, offenders


def test_every_exception_lives_in_errors():
    defined = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(b) for b in node.bases}
                if any(b.endswith(("Error", "Exception", "Warning")) for b in bases):
                    defined.append(f"{name}.{node.name}")
    assert all(d.startswith("npt_dask.errors.") for d in defined), defined


def test_block_engine_is_numpy_only():
    """The layer rule of :mod:`npt_dask.blocks`: numpy blocks in, numpy out."""
    allowed = {"npt_dask._buffers", "npt_dask.kernels"}
    tree = ast.parse(MODULES["npt_dask.blocks"].read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    third_party = {m.split(".")[0] for m in imported if not m.startswith("npt_dask")}
    assert third_party <= {"numpy", "__future__", "collections", "typing"}, third_party
    assert {m for m in imported if m.startswith("npt_dask")} <= allowed
