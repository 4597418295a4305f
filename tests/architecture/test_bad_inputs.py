"""The bad-input corpus: one table over the public API, the command line and the stores.

Every row is a bad input and the error it must produce: its type (always a
ValueError or TypeError subclass; for the command line, exit status 2 and one
line on stderr), a message fragment naming the problem or the fix, and that
the workspace -- an earlier model, an earlier projection, data files -- is
byte for byte what it was: nothing written, nothing damaged.
"""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import pytest
import zarr

import npt_dask as npt
from npt_dask.interface import cli
from tests._clusters import tree_digest

CLI = "cli"  # the expected "error" of a command-line row: exit status 2


@dataclass(frozen=True)
class Env:
    """A fresh copy of the workspace for one row."""

    ws: Path
    x: np.ndarray
    z: np.ndarray
    model: npt.NPTModel
    other: npt.NPTModel  # a second model, for "a projection of another model"

    def __call__(self, name: str) -> Path:
        return self.ws / name


@dataclass(frozen=True)
class Bad:
    id: str
    run: Callable[[Env], Any]
    error: type[Exception] | str
    match: str


def _free_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{s.getsockname()[1]}"


def _nan(x: np.ndarray, value: float = np.nan) -> np.ndarray:
    bad = x.copy()
    bad[7, 2] = value
    return bad


def _fit(data: Any, **kw: Any) -> Any:
    return npt.fit(data, **{"n_components": 3, **kw})


def _project(env: Env, data: Any, out: str = "new.zarr", **kw: Any) -> Any:
    return npt.project(kw.pop("model", env.model), data, env(out), progress=False, **kw)


CASES = [
    # --- npt.fit: data ------------------------------------------------------------
    Bad("fit-nan", lambda e: _fit(_nan(e.x)), npt.InputError, "NaN or infinity; remove or impute"),
    Bad("fit-inf", lambda e: _fit(_nan(e.x, np.inf)), npt.InputError, "NaN or infinity"),
    Bad("fit-object", lambda e: _fit(e.x.astype(object)), npt.InputTypeError, "x.astype(float)"),
    Bad("fit-strings", lambda e: _fit(e.x.astype(str)), npt.InputTypeError, "must be numeric"),
    Bad("fit-1d", lambda e: _fit(e.x[:, 0]), npt.InputError, "must be 2-D"),
    Bad("fit-3d", lambda e: _fit(e.x.reshape(60, 2, 2)), npt.InputError, "reshape"),
    Bad("fit-empty", lambda e: _fit(e.x[:0]), npt.InputError, "need at least 2 samples"),
    Bad("fit-one-sample", lambda e: _fit(e.x[:1]), npt.InputError, "need at least 2 samples"),
    Bad("fit-no-features", lambda e: _fit(e.x[:, :0]), npt.InputError, "0 features"),
    Bad(
        "fit-constant",
        lambda e: _fit(np.ones((40, 4))),
        npt.NegativeEigenvalueError,
        "all rows are identical",
    ),
    Bad("fit-ragged", lambda e: _fit([[1.0, 2.0], [3.0]]), npt.InputTypeError, "converted"),
    Bad("fit-path", lambda e: _fit(str(e("train.npy"))), npt.InputTypeError, "array-like"),
    # --- npt.fit: parameters ------------------------------------------------------
    Bad("fit-gamma<0", lambda e: _fit(e.x, gamma=-0.5), npt.KernelParameterError, "'gamma'"),
    Bad(
        "fit-degree-0",
        lambda e: _fit(e.x, kernel="polynomial", degree=0),
        npt.KernelParameterError,
        "degree >= 1",
    ),
    Bad("fit-r-0", lambda e: _fit(e.x, n_components=0), npt.InputError, "'n_components'"),
    Bad("fit-r>n", lambda e: _fit(e.x, n_components=60), npt.InputError, "rank at most 59"),
    Bad("fit-kernel", lambda e: _fit(e.x, kernel="gauss"), npt.KernelParameterError, "choose"),
    Bad(
        "fit-sigmoid-not-psd",
        lambda e: _fit(e.x, kernel="sigmoid", gamma=1.0, coef0=1.0, on_negative="raise"),
        npt.NegativeEigenvalueError,
        "not positive semi-definite",
    ),
    # --- model.transform --------------------------------------------------------------
    Bad("transform-features", lambda e: e.model.transform(e.z[:, :3]), npt.InputError, "features"),
    Bad("transform-strings", lambda e: e.model.transform(e.z.astype(str)), TypeError, "numeric"),
    Bad("transform-nan", lambda e: e.model.transform(_nan(e.z)), npt.InputError, "NaN"),
    Bad("transform-empty", lambda e: e.model.transform(e.z[:0]), npt.InputError, "1 sample"),
    # --- npt.project --------------------------------------------------------------------
    Bad("project-features", lambda e: _project(e, e.z[:, :3]), npt.InputError, "expects 4"),
    Bad("project-nan", lambda e: _project(e, _nan(e.z)), npt.InputError, "NaN"),
    Bad(
        "project-nan-lazy",  # checked in one read pass before the store is created
        lambda e: _project(e, da.from_array(_nan(e.z), chunks=(7, -1))),
        npt.InputError,
        "NaN or infinity",
    ),
    Bad("project-object", lambda e: _project(e, e.z.astype(object)), TypeError, "astype(float)"),
    Bad(
        "project-into-model",
        lambda e: _project(e, e.z, "m.zarr"),
        npt.ProjectionError,
        "not an npt projection store",
    ),
    Bad(
        "project-into-model-no-resume",
        lambda e: _project(e, e.z, "m.zarr", resume=False),
        npt.ProjectionError,
        "refusing to overwrite",
    ),
    Bad(
        "project-other-model",
        lambda e: _project(e, e.z, "p.zarr", model=e.other),
        npt.ProjectionError,
        "model_checksum",
    ),
    Bad("project-into-file", lambda e: _project(e, e.z, "notes.txt"), npt.ProjectionError, "file"),
    Bad(
        "project-under-file",
        lambda e: _project(e, e.z, "notes.txt/p.zarr"),
        npt.ProjectionError,
        "is a file",
    ),
    Bad(
        "project-model-path",
        lambda e: npt.project(str(e("m.zarr")), e.z, e("new.zarr")),
        npt.InputTypeError,
        "npt.load(path)",
    ),
    Bad("project-chunk-0", lambda e: _project(e, e.z, chunk_size=0), npt.InputError, "chunk_size"),
    Bad("project-missing", lambda e: _project(e, e("no.npy")), npt.InputError, "does not exist"),
    Bad("project-dir", lambda e: _project(e, e("plain.zarr")), npt.InputError, "--var"),
    Bad("project-not-data", lambda e: _project(e, e("empty")), npt.InputError, "not a .npy"),
    Bad("project-npz-key", lambda e: _project(e, e("test.npz")), npt.InputError, "--key"),
    # --- stores -----------------------------------------------------------------------
    Bad("load-plain-zarr", lambda e: npt.load(e("plain.zarr")), npt.StoreError, "not an npt model"),
    Bad("load-missing", lambda e: npt.load(e("none.zarr")), npt.StoreError, "not a zarr store"),
    Bad("load-file", lambda e: npt.load(e("notes.txt")), npt.StoreError, "not a zarr store"),
    Bad("load-projection", lambda e: npt.load(e("p.zarr")), npt.StoreError, "not an npt model"),
    Bad("load-corrupt", lambda e: npt.load(e("corrupt.zarr")), npt.StoreError, "integrity"),
    Bad("load-partial", lambda e: npt.load(e("partial.zarr")), npt.StoreError, "chunks missing"),
    Bad("load-truncated", lambda e: npt.load(e("truncated.zarr")), npt.StoreError, "opened"),
    Bad("save-over-file", lambda e: e.model.save(e("notes.txt")), npt.StoreError, "is a file"),
    Bad(
        "save-over-zarr-data",
        lambda e: e.model.save(e("plain.zarr")),
        npt.StoreError,
        "not an npt model; refusing",
    ),
    Bad("save-under-file", lambda e: e.model.save(e("notes.txt/m.zarr")), npt.StoreError, "file"),
    Bad(
        "save-over-projection",
        lambda e: e.model.save(e("p.zarr")),
        npt.StoreError,
        "not an npt model; refusing",
    ),
    # --- cluster.connect ----------------------------------------------------------------
    Bad(
        "connect-no-answer",
        lambda e: npt.connect(_free_address(), timeout=1),
        npt.ClusterError,
        "No dask scheduler answered",
    ),
    Bad(
        "connect-tls-no-certs", lambda e: npt.connect("tls://127.0.0.1:1"), ValueError, "TLSConfig"
    ),
    Bad(
        "connect-no-scheduler-file",
        lambda e: npt.connect(scheduler_file=e("none.json")),
        npt.ClusterError,
        "cannot be read",
    ),
    Bad(
        "connect-bad-scheduler-file",
        lambda e: npt.connect(scheduler_file=e("notes.txt")),
        npt.ClusterError,
        "not a dask scheduler file",
    ),
    # --- the command line ----------------------------------------------------------------
    Bad(
        "cli-fit-nan",
        lambda e: ["fit", e("nan.npy"), "--n-components", "2", "--out", e("new.zarr")],
        CLI,
        "NaN or infinity",
    ),
    Bad(
        "cli-fit-degree-0",
        lambda e: [
            "fit",
            e("train.npy"),
            "--kernel",
            "polynomial",
            "--degree",
            "0",
            "--n-components",
            "2",
            "--out",
            e("new.zarr"),
        ],
        CLI,
        "degree",
    ),
    Bad(
        "cli-fit-over-file",
        lambda e: ["fit", e("train.npy"), "--n-components", "2", "--out", e("notes.txt")],
        CLI,
        "is a file",
    ),
    Bad(
        "cli-project-into-model",
        lambda e: ["project", e("m.zarr"), e("test.npy"), "--out", e("m.zarr")],
        CLI,
        "is the input MODEL",
    ),
    Bad(
        "cli-project-corrupt",
        lambda e: ["project", e("corrupt.zarr"), e("test.npy"), "--out", e("new.zarr")],
        CLI,
        "integrity",
    ),
    Bad(
        "cli-project-no-scheduler",
        lambda e: [
            "project",
            e("m.zarr"),
            e("test.npy"),
            "--out",
            e("new.zarr"),
            "--scheduler",
            _free_address(),
            "--scheduler-timeout",
            "1",
        ],
        CLI,
        "No dask scheduler answered",
    ),
    Bad(
        "cli-project-tls-half",
        lambda e: [
            "project",
            e("m.zarr"),
            e("test.npy"),
            "--out",
            e("new.zarr"),
            "--tls-cert",
            e("notes.txt"),
        ],
        CLI,
        "--tls-ca-file",
    ),
    Bad("cli-info-plain-zarr", lambda e: ["info", e("plain.zarr")], CLI, "not an npt model"),
]


def _chunk_files(store: Path, name: str) -> list[Path]:
    return sorted(p for p in (store / name / "c").rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """The workspace every row starts from: models, a projection, data, other things."""
    root = tmp_path_factory.mktemp("pristine")
    rng = np.random.default_rng(21)
    x, z = rng.normal(size=(60, 4)), rng.normal(size=(50, 4))
    model = npt.fit(x, "rbf", gamma=0.3, n_components=3, chunk_size=20)
    other = npt.fit(x, "rbf", gamma=0.5, n_components=3, chunk_size=20)
    model.save(root / "m.zarr")
    npt.project(model, z, root / "p.zarr", chunk_size=25, progress=False)
    for name in ("corrupt", "partial", "truncated"):
        shutil.copytree(root / "m.zarr", root / f"{name}.zarr")
    chunk = _chunk_files(root / "corrupt.zarr", "eigenvectors")[0]
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    _chunk_files(root / "partial.zarr", "x_train")[-1].unlink()
    meta = root / "truncated.zarr" / "zarr.json"
    meta.write_text(meta.read_text()[:50])
    zarr.open_group(str(root / "plain.zarr"), mode="w").create_array("a", shape=(3,), dtype="f8")
    np.save(root / "train.npy", x)
    np.save(root / "test.npy", z)
    np.save(root / "nan.npy", _nan(x))
    np.savez(root / "test.npz", rows=z)
    (root / "notes.txt").write_text("precious")
    (root / "empty").mkdir()
    (root / "empty" / "readme").write_text("not data")
    return root, x, z, model, other


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, pristine, tmp_path, capsys):
    root, x, z, model, other = pristine
    ws = tmp_path / "ws"
    shutil.copytree(root, ws)
    env = Env(ws, x, z, model, other)
    before = tree_digest(ws)
    if case.error == CLI:
        argv = [str(a) for a in case.run(env)]
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"npt {argv[0]}: error: ")
        assert case.match in err
        assert "Traceback" not in err
    else:
        assert issubclass(case.error, ValueError | TypeError)
        with pytest.raises(case.error, match=_literal(case.match)) as info:
            case.run(env)
        assert isinstance(info.value, ValueError | TypeError)
        assert isinstance(info.value, npt.NPTError)
    assert tree_digest(ws) == before  # nothing written, nothing damaged
    assert not (ws / "new.zarr").exists()


def _literal(fragment: str) -> str:
    import re

    return re.escape(fragment)


def test_the_corpus_is_large_and_covers_every_surface():
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)
    surfaces = {c.id.split("-")[0] for c in CASES}
    assert {"fit", "transform", "project", "load", "save", "connect", "cli"} <= surfaces


def test_duplicated_rows_are_valid_data(pristine):
    """Duplicates add no dimension: they fit, share coordinates, and the rank stays."""
    _, x, _z, _, _ = pristine
    doubled = np.vstack([x, x[:20]])
    model = npt.fit(doubled, "rbf", gamma=0.3, n_components=5)
    y = model.train_coordinates()
    np.testing.assert_allclose(y[60:], y[:20], atol=1e-10)
    np.testing.assert_allclose(model.transform(x[:20]), y[:20], atol=1e-8)
    tiny = np.vstack([x[:3]] * 10)  # 30 rows, 3 distinct: centred rank 2
    with pytest.warns(npt.RankWarning):
        assert npt.fit(tiny, "rbf", gamma=0.3, n_components=4).n_components == 2
    json.dumps(model.diagnostics.to_dict(), default=str)  # still a normal model
