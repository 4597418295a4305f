"""Clean edges: no import cycles, no private names across modules, one errors module,
imports that follow the layer order of the folders, benchmarks that import what exists.

Read from the source with ``ast`` (nothing is imported): every ``import`` and
``from ... import`` of an ``npt_dask`` module counts, at module level or inside
a function, except under ``if TYPE_CHECKING:`` (annotations only).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "npt_dask"


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


def _imports(name: str, *, every: bool = False) -> list[tuple[str, list[str]]]:
    """``(module imported, names taken from it)`` for every npt_dask import of ``name``
    (``every``: those under ``if TYPE_CHECKING:`` too)."""
    tree = ast.parse(MODULES[name].read_text())
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    return _imports_in(tree, package, every=every)


def _imports_in(tree: ast.AST, package: str, *, every: bool) -> list[tuple[str, list[str]]]:
    skip = set() if every else _type_checking_nodes(tree)
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
            if attributes := [n for n in names if f"{base}.{n}" not in MODULES]:
                # ``from package import submodule`` loads the submodule, not the package's
                # __init__ (its facade): an edge to the package only for names it defines
                out.append((base, attributes))
    return out


def _graph(*, every: bool = False) -> dict[str, set[str]]:
    graph = {}
    for name in MODULES:
        targets = set()
        for target, _ in _imports(name, every=every):
            while target not in MODULES and "." in target:
                target = target.rpartition(".")[0]
            if target != name:
                targets.add(target)
        graph[name] = targets
    return graph


def _cycle(graph: dict[str, set[str]], *, every_edge: bool = False) -> list[str] | None:
    """A cycle of ``graph`` (a list of modules, the first repeated last), or None.

    Unless ``every_edge``, a module's edge up to its own package's ``__init__`` is not
    followed (the package re-exports it)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            # a package's __init__ importing its own submodules is not a cycle of logic
            up = node.startswith(nxt + ".") and MODULES.get(nxt, Path()).name == "__init__.py"
            if up and not every_edge:
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


# --- no loops of any kind -----------------------------------------------------------------


def _graph_of_any_kind() -> dict[str, set[str]]:
    """Every import edge between npt_dask modules: at module level, inside functions and
    under ``if TYPE_CHECKING:`` alike. A package's edges to its own children are kept: a
    child that reaches its package's ``__init__`` back (``from npt_dask import
    __version__`` in a module the facade imports) closes a loop like any other."""
    return _graph(every=True)


def test_no_import_cycle_of_any_kind():
    """No module imports one that imports it, however it imports it: an import for
    annotations or inside a function is a loop of the design too (the model is built on
    by the projector, the store and growth, which read it as a record and never import
    it back), and so is a module's import of the package facade that imports it."""
    graph = _graph_of_any_kind()
    found = _cycle(graph, every_edge=True)
    assert found is None, " -> ".join(found or [])


def test_the_any_kind_cycle_check_can_fail():
    hidden = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from npt_dask.npt.model import NPTModel\n"
        "def grow():\n    from npt_dask.npt import growth\n"
    )
    tree = ast.parse(hidden)
    assert {t for t, _ in _imports_in(tree, "npt_dask", every=True)} >= {
        "npt_dask.npt.model", "npt_dask.npt.growth",
    }  # fmt: skip
    assert "npt_dask.npt.model" not in {t for t, _ in _imports_in(tree, "npt_dask", every=False)}
    graph = _graph_of_any_kind()
    assert "npt_dask.storage.store" in graph["npt_dask.npt.model"]
    graph["npt_dask.storage.store"].add("npt_dask.npt.model")  # the store naming the model it saves
    assert _cycle(graph, every_edge=True) is not None


def test_the_any_kind_cycle_check_sees_a_child_importing_its_facade():
    """``store`` reading ``__version__`` from the facade that
    imports ``store`` is a loop; ``from npt_dask import errors`` (a submodule) is not."""
    facade = "def _manifest():\n    from npt_dask import __version__\n"
    submodule = "from npt_dask import errors\nfrom npt_dask.runtime import atomic\n"
    assert _imports_in(ast.parse(facade), "npt_dask", every=True) == [("npt_dask", ["__version__"])]
    assert {t for t, _ in _imports_in(ast.parse(submodule), "npt_dask", every=True)} == {
        "npt_dask.runtime.atomic", "npt_dask.errors",
    }  # fmt: skip
    graph = _graph_of_any_kind()
    assert "npt_dask.storage.store" in graph["npt_dask"]  # the facade imports the store
    assert _cycle(graph, every_edge=True) is None
    graph["npt_dask.storage.store"].add("npt_dask")  # the store's old version import
    found = _cycle(graph, every_edge=True)
    assert found is not None
    assert found[0] == found[-1] == "npt_dask", found
    assert found[-2] == "npt_dask.storage.store", found


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


# --- one atomic writer --------------------------------------------------------------------

ATOMIC = "npt_dask.runtime.atomic"
_RENAMES = {"os.rename", "os.replace", "os.renames", "shutil.move"}


def _renames(tree: ast.AST) -> list[str]:
    """Every rename in ``tree``: ``os.rename/replace/renames``, ``shutil.move`` (called or
    imported by name), and ``Path.rename``/``Path.replace`` (a ``.rename(...)`` call, or a
    ``.replace(target)`` with one argument: ``str.replace`` takes two, and
    ``dataclasses.replace`` is told apart by name)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil"):
            found += [
                f"from {node.module} import {a.name}"
                for a in node.names
                if f"{node.module}.{a.name}" in _RENAMES
            ]
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, receiver = node.func.attr, ast.unparse(node.func.value)
        path_replace = name == "replace" and len(node.args) == 1 and receiver != "dataclasses"
        if f"{receiver}.{name}" in _RENAMES or name == "rename" or path_replace:
            found.append(ast.unparse(node))
    return found


def test_only_the_atomic_module_renames_stores():
    """Temporary names, swaps, recovery and sweeps live in one module."""
    assert ATOMIC in MODULES
    offenders = {
        name: found
        for name, path in MODULES.items()
        if name != ATOMIC and (found := _renames(ast.parse(path.read_text())))
    }
    assert not offenders, offenders
    assert _renames(ast.parse(MODULES[ATOMIC].read_text()))  # the check sees its renames


def test_the_rename_check_can_fail():
    code = (
        "import os, shutil\nfrom os import replace\nos.replace(a, b)\nshutil.move(a, b)\n"
        "p.rename(q)\np.replace(q)\n"
        "s.replace('a', 'b')\ndataclasses.replace(m)\nparams.replace(n=1)\n"
    )
    assert _renames(ast.parse(code)) == [
        "from os import replace", "os.replace(a, b)", "shutil.move(a, b)", "p.rename(q)",
        "p.replace(q)",
    ]  # fmt: skip


def test_block_engine_is_numpy_only():
    """The layer rule of :mod:`npt_dask.engine.blocks`: arrays in, arrays out (numpy, or another
    array API namespace through :mod:`npt_dask.arrays.namespace`, to host through
    :mod:`npt_dask.arrays.host`); no dask, xarray or zarr (the
    standard library's threading, weakref and functools serve its per-process memo of
    prepared centres, ``blocks._PREPARED``)."""
    allowed = {"npt_dask.arrays.buffers", "npt_dask.arrays.host", "npt_dask.arrays.namespace",
               "npt_dask.kernels"}  # fmt: skip
    tree = ast.parse(MODULES["npt_dask.engine.blocks"].read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    third_party = {m.split(".")[0] for m in imported if not m.startswith("npt_dask")}
    stdlib = {"__future__", "collections", "dataclasses", "functools", "threading", "typing",
              "weakref"}  # fmt: skip
    assert third_party <= {"numpy", *stdlib}, third_party
    assert {m for m in imported if m.startswith("npt_dask")} <= allowed


# --- the layers, one folder each ----------------------------------------------------------

SHIMS = ["npt_dask.cli", "npt_dask.cluster", "npt_dask.datasets", "npt_dask.pipeline",
         "npt_dask.plot"]  # fmt: skip
"""Old module paths kept as modules that warn and re-export, until npt-dask 0.3.0."""

LAYERS: list[list[str]] = [
    ["npt_dask.errors", "npt_dask._version", "npt_dask._lazy"],
    ["npt_dask.params"],
    ["npt_dask.arrays"],
    ["npt_dask.kernels"],
    ["npt_dask.runtime"],
    ["npt_dask.linalg"],
    ["npt_dask.engine"],
    ["npt_dask.storage"],
    ["npt_dask.npt"],
    ["npt_dask.ridge", "npt_dask.methods"],
    ["npt_dask.interface", "npt_dask.__main__", *SHIMS],
]
"""The layers, lowest first: a module imports from its own layer or those below it."""


def _layer_of(module: str, layers: list[list[str]]) -> int | None:
    for rank, layer in enumerate(layers):
        if any(module == m or module.startswith(m + ".") for m in layer):
            return rank
    return None


def _upward_imports(graph: dict[str, set[str]], layers: list[list[str]]) -> list[str]:
    """``a -> ... -> b`` for each layered module ``a`` that reaches a module ``b`` of a
    higher layer, directly or through modules of no layer. The package facade
    (``npt_dask/__init__.py``, which re-exports everything) is not a step."""
    found = []
    for start in sorted(graph):
        low = _layer_of(start, layers)
        if low is None:
            continue
        paths, todo = {start: [start]}, [start]
        while todo:
            node = todo.pop()
            for nxt in sorted(graph[node]):
                if nxt in paths or nxt == "npt_dask" or nxt.startswith(start + "."):
                    continue
                paths[nxt] = [*paths[node], nxt]
                high = _layer_of(nxt, layers)
                if high is not None and high > low:
                    found.append(" -> ".join(paths[nxt]))
                else:
                    todo.append(nxt)
    return found


def test_every_module_has_a_layer():
    """No module sits outside the layers but the facade: a new folder is placed on purpose."""
    unplaced = [m for m in MODULES if m != "npt_dask" and _layer_of(m, LAYERS) is None]
    assert not unplaced, unplaced


def test_the_top_holds_only_the_face():
    """Beside the folders, the top holds the facade, the errors, the version, the lazy
    exports of the facade and the old module paths that warn (:data:`SHIMS`), nothing
    else."""
    top = {m for m in MODULES if m.count(".") == 1 and MODULES[m].name != "__init__.py"}
    assert top == {"npt_dask.errors", "npt_dask._version", "npt_dask._lazy",
                   "npt_dask.__main__", *SHIMS} - {"npt_dask.pipeline"}, top  # fmt: skip


def test_imports_follow_the_layer_order():
    assert _upward_imports(_graph(), LAYERS) == []


def test_the_layer_check_can_fail():
    layers = [["a"], ["b"], ["c"]]
    assert _upward_imports({"a": {"x"}, "x": {"c"}, "b": set(), "c": set()}, layers) == [
        "a -> x -> c"
    ]
    assert _upward_imports({"a": set(), "b": {"a"}, "c": {"b"}}, layers) == []


# --- benchmarks/ --------------------------------------------------------------------------

BENCHMARKS = sorted((PACKAGE.parent / "benchmarks").glob("*.py"))


def test_benchmarks_import_only_public_names_that_exist():
    """Every ``from npt_dask... import name`` in benchmarks/, also inside functions (which a
    plain import of the script does not run), names a public attribute or module that
    exists."""
    import importlib
    import importlib.util

    offenders = []
    for path in BENCHMARKS:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("npt_")):
                continue
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                private = alias.name.startswith("_") and alias.name != "__version__"
                package = hasattr(module, "__path__")
                submodule = package and importlib.util.find_spec(f"{node.module}.{alias.name}")
                if private or not (hasattr(module, alias.name) or submodule):
                    offenders.append(f"{path.name}: from {node.module} import {alias.name}")
    assert not offenders, offenders


# --- array-API blocks ---------------------------------------------------------------------


def _strict(*arrays):
    import array_api_strict

    return [array_api_strict.asarray(a) for a in arrays]


def _same(got, want, tol=1e-12):
    """``got`` is an ``array_api_strict`` array (the namespace kept, never numpy) equal to
    the numpy result ``want`` within ``tol`` of its largest entry."""
    import array_api_compat
    import numpy as np

    assert array_api_compat.array_namespace(got).__name__ == "array_api_strict", type(got)
    got = np.from_dlpack(got)
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale)


def test_every_named_kernel_gives_the_same_blocks_on_array_api_strict():
    """The kernels' numerics on ``array_api_strict`` (the standard and nothing more) give
    numpy's blocks and diagonals (<= 1e-12, float64), so a CuPy or torch namespace runs
    the same code; float32 stays float32."""
    import numpy as np

    from npt_dask.kernels import KERNELS, make_kernel
    from tests.conftest import KERNEL_VALUES

    assert set(KERNEL_VALUES) == set(KERNELS)
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(53, 7)), rng.normal(size=(41, 7))
    a[3] = 0.0  # a zero row (cosine)
    for name, values in KERNEL_VALUES.items():
        spec = make_kernel(name, **values).resolve(7)
        sa, sb = _strict(a, b)
        _same(spec(sa, sb), spec(a, b))
        _same(spec(sa, sa), spec(a, a))
        _same(spec.diag(sa), spec.diag(a))
        single = spec(*_strict(a.astype(np.float32), b.astype(np.float32)))
        assert "float32" in str(single.dtype), (name, single.dtype)


def test_block_products_are_the_same_on_array_api_strict():
    """``block_products`` (both halves, float64 and float32 blocks), ``block_times``,
    ``pair_task`` and ``finish_parts`` on ``array_api_strict`` match numpy's fast
    paths (scratch buffers, ``out=``), <= 1e-12."""
    import numpy as np

    from npt_dask.engine.blocks import PANEL_ROWS, block_products, block_times
    from npt_dask.engine.passes import pair_task
    from npt_dask.engine.projection import finish_parts
    from npt_dask.kernels import make_kernel

    rng = np.random.default_rng(1)
    rows = PANEL_ROWS + 37  # more than one panel of the fused sweep
    block, v_i, v_j = rng.normal(size=(rows, 90)), rng.normal(size=(rows, 5)), None
    v_j = rng.normal(size=(90, 5))
    for diagonal, right in ((False, v_j), (True, v_i[:90])):
        square = block[:90] if diagonal else block
        left = v_i[:90] if diagonal else v_i
        for dtype in (np.float64, np.float32):
            want = block_products(square.astype(dtype), left, right, diagonal)
            got = block_products(*_strict(square.astype(dtype), left, right), diagonal)
            assert len(got) == len(want) == (1 if diagonal else 2)
            for g, w in zip(got, want, strict=True):
                _same(g, w, 1e-12 if dtype == np.float64 else 1e-6)
    _same(block_times(*_strict(block, v_j)), block_times(block, v_j))
    x_i, x_j = rng.normal(size=(60, 4)), rng.normal(size=(45, 4))
    spec = make_kernel("rbf", gamma=0.4)
    u_i, u_j = rng.normal(size=(60, 3)), rng.normal(size=(45, 3))
    want = pair_task(x_i, u_i, x_j, u_j, spec, False)
    got = pair_task(*_strict(x_i, u_i, x_j, u_j), spec, False)
    for g, w in zip(got, want, strict=True):
        _same(g, w)
    p, diag = rng.normal(size=(60, 4)), 10.0 + rng.random(60)
    terms = {"offset": rng.normal(size=3), "ones": rng.normal(size=3), "grand_mean": 0.2}
    for center in (True, False):
        want = finish_parts(p, diag, **terms, center=center)
        got = finish_parts(*_strict(p, diag), **terms, center=center)
        for g, w in zip(got, want, strict=True):
            _same(g, w)


def test_the_operator_seam_evaluates_in_the_namespace_of_its_rows():
    """:class:`npt_dask.engine.consumers.RowBlock` takes the namespace of the rows it is handed
    (the one decision), brings the centres there; every product consumer's result stays in
    that namespace until :meth:`~npt_dask.engine.consumers.Consumer.finish` takes it to host
    (numpy), the same as numpy's."""
    import array_api_compat
    import numpy as np

    from npt_dask.engine.consumers import Apply, Cross, Gram, Normal, Projection, RowBlock
    from npt_dask.engine.projection import projection_terms
    from npt_dask.kernels import make_kernel
    from npt_dask.linalg.tiles import TiledUpper

    rng = np.random.default_rng(2)
    z, x, w = rng.normal(size=(50, 6)), rng.normal(size=(20, 6)), rng.normal(size=(20, 3))
    aux = {"weights": rng.random(50), "targets": rng.normal(size=50)}
    terms = projection_terms(rng.normal(size=(20, 2)), rng.normal(size=20), 0.3, True)
    spec = make_kernel("laplacian", gamma=0.3)
    consumers = {"apply": Apply(), "projection": Projection(terms), "gram": Gram(),
                 "cross": Cross(), "normal": Normal(rng.normal(size=(20, 2)))}  # fmt: skip
    strict_rows = RowBlock(_strict(z)[0], ([x], [w]), spec, aux)
    assert "array_api_strict" in strict_rows.xp.__name__
    for name, consumer in consumers.items():
        want = consumer(RowBlock(z, ([x], [w]), spec, aux), None)
        got = consumer(RowBlock(_strict(z)[0], ([x], [w]), spec, aux), None)
        assert "array_api_strict" in array_api_compat.array_namespace(got).__name__, name
        got, want = consumer.finish(got), consumer.finish(want)
        if name == "gram":  # host tiles of the upper triangle are the sum's contract
            assert type(got) is TiledUpper, name
            got, want = np.triu(got.to_full()), np.triu(want.to_full())
        assert type(got) is np.ndarray, name
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=name)


def test_the_plans_split_device_from_host_memory():
    """The blocks in flight and kept are device bytes, the driver's matrices host bytes;
    the two add up to what the budget check counts (unchanged on numpy)."""
    from npt_dask.engine.budget import in_flight_bytes
    from npt_dask.npt.planning import plan_fit
    from npt_dask.ridge.planning import plan_ridge
    from npt_dask.ridge.problem import DEVICE_PARTS

    plan = plan_fit(n=4000, d=5, n_components=20, row_chunks=[500] * 8, itemsize=8,
                    solver="krylov", memory_budget=2**30, threads=2)  # fmt: skip
    assert plan.kept_bytes > 0
    assert plan.device_bytes == in_flight_bytes(500, 2) + plan.kept_bytes
    assert plan.device_bytes + plan.host_bytes == plan.driver_bytes + plan.worker_bytes
    assert plan.host_bytes >= plan.driver_bytes > 0
    assert {"device_bytes", "host_bytes"} <= set(plan.to_dict())
    for m in (None, 300):  # exact CG (auto: the direct route, its matrix the host's)
        ridge = plan_ridge(n=4000, m=m, d=5, k=1, itemsize=8, memory_budget=2**30, threads=2,
                           solver="cg" if m is None else "auto")  # fmt: skip
        assert ridge.device_bytes == sum(v for k, v in ridge.memory.items() if k in DEVICE_PARTS)
        assert ridge.device_bytes > 0
        assert ridge.host_bytes > 0
        assert ridge.device_bytes + ridge.host_bytes == sum(ridge.memory.values())
        assert ridge.to_dict()["device_bytes"] == ridge.device_bytes


# --- the old public module paths, and first imports from several threads -------------------


def test_old_module_paths_warn_and_give_the_moved_modules_names():
    """``npt_dask.datasets``, ``.plot``, ``.cluster``, ``.cli``, ``.pipeline`` (and the
    pipeline's modules) are plain modules that warn once imported (a DeprecationWarning
    at the importing line, naming the new path and the release that removes them) and
    hand on the moved modules' names, the very objects; ``python -m npt_dask.cli`` runs
    the command line (in a fresh interpreter: the first import decides)."""
    import subprocess
    import sys

    code = """
import warnings
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    import npt_dask.pipeline.config as a, npt_dask.interface.pipeline.config as b
    from npt_dask.datasets import load_npz
    from npt_dask.cli import main
    from npt_dask.plot import spectrum
    from npt_dask.cluster import connect
import npt_dask.storage.datasets as d, npt_dask.interface.cli.program as e
import npt_dask.interface.plot as f, npt_dask.runtime.cluster as g
assert a.PipelineConfig is b.PipelineConfig and a.load_config is b.load_config
assert load_npz is d.load_npz and main is e.main and spectrum is f.spectrum
assert connect is g.connect
words = [str(w.message) for w in seen if w.category is DeprecationWarning]
for old, new in [("npt_dask.pipeline.config", "npt_dask.interface.pipeline.config"),
                 ("npt_dask.datasets", "npt_dask.storage.datasets"),
                 ("npt_dask.cli", "npt_dask.interface.cli"),
                 ("npt_dask.plot", "npt_dask.interface.plot"),
                 ("npt_dask.cluster", "npt_dask.runtime.cluster")]:
    assert any(w.startswith(old + " is deprecated") and "0.3.0" in w and new in w
               for w in words), (old, words)
assert all(w.filename == "<string>" for w in seen), [w.filename for w in seen]
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    out = subprocess.run([sys.executable, "-m", "npt_dask.cli", "--help"], check=True,
                         capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    assert out.startswith("usage: npt")


_THREADED_IMPORTS = """
import importlib, sys, threading, warnings
warnings.simplefilter("ignore", DeprecationWarning)
targets = sys.argv[1:]
barrier = threading.Barrier(len(targets))
errors = []

def load(target):
    module, _, name = target.partition(":")
    barrier.wait()  # every thread starts its first import at once
    try:
        value = importlib.import_module(module)
        if name:
            getattr(value, name)
    except BaseException as exc:
        errors.append(f"{target}: {exc!r}")

threads = [threading.Thread(target=load, args=(t,)) for t in targets]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
assert not errors, errors
"""

FIRST_IMPORTS = [
    "npt_dask", "npt_dask:fit", "npt_dask:KernelRidge", "npt_dask.storage.datasets",
    "npt_dask.interface.cli", "npt_dask.interface.cli.fit", "npt_dask.interface.pipeline",
    "npt_dask.interface.pipeline.runner", "npt_dask.kernels", "npt_dask.kernels.specs",
    "npt_dask.methods", "npt_dask.methods.kfd", "npt_dask.engine.operator",
    "npt_dask.ridge.planning", "npt_dask.cli", "npt_dask.datasets", "npt_dask.pipeline.config",
    "npt_dask.plot", "npt_dask.cluster",
]  # fmt: skip
"""First imports made at once: packages and their own modules, new paths and old."""


def test_a_first_import_from_many_threads_at_once_works():
    """Each thread of a fresh interpreter imports one of :data:`FIRST_IMPORTS` at the same
    moment (a module, or a name of the package ``npt_dask``), three times, each time
    another thread first: none fails, none gets a half-initialised module. A package
    that imported its own modules when imported could deadlock here (the importing
    thread takes a module's lock before it runs its package's ``__init__``), so the
    packages hand on their names lazily (:mod:`npt_dask._lazy`)."""
    import subprocess
    import sys

    for attempt in range(3):
        order = FIRST_IMPORTS[attempt:] + FIRST_IMPORTS[:attempt]
        subprocess.run([sys.executable, "-c", _THREADED_IMPORTS, *order], check=True,
                       timeout=300)  # fmt: skip


def test_the_threaded_import_check_can_fail(tmp_path):
    """A package whose ``__init__`` imports its own modules, imported from one thread
    while another imports one of those modules (which imports a sub-package: a wait
    for the package to finish), fails the check."""
    import subprocess
    import sys

    (tmp_path / "eager" / "sub").mkdir(parents=True)
    (tmp_path / "eager" / "__init__.py").write_text(
        "import time\ntime.sleep(0.2)\nfrom eager.a import A\n"
    )
    (tmp_path / "eager" / "a.py").write_text("from eager.b import B\nA = 1\n")
    (tmp_path / "eager" / "b.py").write_text("from eager.sub.c import C\nB = 2\n")
    (tmp_path / "eager" / "sub" / "__init__.py").write_text("")
    (tmp_path / "eager" / "sub" / "c.py").write_text("C = 3\n")
    runs = [
        subprocess.run([sys.executable, "-c", _THREADED_IMPORTS, *order], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
        for order in (["eager.b", "eager"], ["eager", "eager.b"])
    ]  # fmt: skip
    assert any(run.returncode != 0 and "eager" in run.stderr for run in runs)


def test_the_packages_import_none_of_their_own_modules_when_imported():
    """The rule the threaded imports need: a package ``__init__`` that re-exports names
    does so lazily (under ``if TYPE_CHECKING:`` for the type checker; the ``.npt``
    accessor and the route registry excepted), and no module imports the package
    ``npt_dask`` itself (it would wait for the facade to finish)."""
    eager = {}
    for name, path in MODULES.items():
        found = [t for t, _ in _imports(name)]
        if path.name == "__init__.py":
            own = [t for t in found if t.startswith(name + ".")]
            own = [t for t in own if t not in ("npt_dask._lazy", "npt_dask.npt.accessor")]
            if own and name != "npt_dask.ridge.routes":
                eager[name] = own
        elif "npt_dask" in found:
            eager[name] = ["npt_dask"]
    assert not eager, eager
