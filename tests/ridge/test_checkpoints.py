"""CG checkpoints that cannot lie: a changed kernel (whatever kind of callable), an
altered or forged file, a foreign, empty, linked or special file, a second writer, and a
re-run that draws its landmarks without a seed.

References are independent of the code under test: dense numpy normal equations from
``pairwise_kernels``, and fits without a checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest
from sklearn.metrics.pairwise import pairwise_kernels

from npt_dask import KernelRidge
from npt_dask.errors import CheckpointError, ConvergenceWarning, InputTypeError
from npt_dask.interface.cli import main
from npt_dask.ridge.checkpoint import array_digest

GAMMA = 0.3
_FIT = {"alpha": 0.05, "landmarks": 40, "solver": "cg", "tol": 1e-10, "random_state": 0}


def _data(n=200, d=4):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d))
    return x, np.column_stack([np.sin(x.sum(axis=1)), np.cos(x[:, 0])])


def _stopped(path, kernel="rbf", max_iter=3, **params):
    """A fit stopped after ``max_iter`` iterations, its state in ``path``."""
    x, t = _data()
    with pytest.warns(ConvergenceWarning):
        return KernelRidge(kernel=kernel, max_iter=max_iter, **{**_FIT, **params}).fit(
            x, t, checkpoint=path
        )


def _resumed(path, kernel="rbf", max_iter=60, *, at=None, **params):
    """A fit on ``path``'s checkpoint; with ``at``, one that must say it resumed from
    iteration ``at`` (a fresh start reaches the same ``n_iter_`` and coefficients)."""
    x, t = _data()
    said = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stderr(said):
        warnings.simplefilter("ignore", ConvergenceWarning)
        fitted = KernelRidge(kernel=kernel, max_iter=max_iter, progress=at is not None,
                             **{**_FIT, **params}).fit(x, t, checkpoint=path)  # fmt: skip
    if at is not None:
        assert f"cg: resuming at iteration {at} from" in said.getvalue(), said.getvalue()
    return fitted


# --------------------------------------------------------------- the kernel, by its values


def _rbf(a, b, gamma=GAMMA):
    return pairwise_kernels(a, b, metric="rbf", gamma=gamma)


def _closure(gamma):
    def rbf(a, b):
        return _rbf(a, b, gamma)

    return rbf


def _with_default(gamma):
    def rbf(a, b, g=gamma):  # the same code, another default
        return _rbf(a, b, g)

    return rbf


class _Rbf:
    def __init__(self, gamma):
        self.gamma = gamma

    def __call__(self, a, b):
        return _rbf(a, b, self.gamma)


GLOBAL_GAMMA = GAMMA


def _global_rbf(a, b):
    return _rbf(a, b, GLOBAL_GAMMA)


@pytest.mark.parametrize("kind", ["closure", "default", "object", "partial", "global", "named"])
def test_a_changed_kernel_is_refused_whatever_callable_it_is(tmp_path, monkeypatch, kind):
    """A kernel whose code is the same and whose values are not (a parameter it closes
    over, holds, is given or reads) does not continue the old problem."""
    kernels = {
        "closure": lambda g: _closure(g), "default": lambda g: _with_default(g),
        "object": lambda g: _Rbf(g), "partial": lambda g: functools.partial(_rbf, gamma=g),
        "global": lambda g: _global_rbf, "named": lambda g: "rbf",
    }  # fmt: skip
    gamma = {"gamma": GAMMA} if kind == "named" else {}
    path = tmp_path / "cg.npz"
    _stopped(path, kernels[kind](GAMMA), **gamma)
    before = path.read_bytes()
    monkeypatch.setattr(sys.modules[__name__], "GLOBAL_GAMMA", 2 * GAMMA)
    gamma = {"gamma": 2 * GAMMA} if kind == "named" else {}
    with pytest.raises(CheckpointError, match=r"another (kernel|problem).*(original kernel|Del)"):
        _resumed(path, kernels[kind](2 * GAMMA), **gamma)
    assert path.read_bytes() == before  # refused, and left as it was


def test_the_same_kernel_made_again_resumes_to_the_answer_of_an_unstopped_fit(tmp_path):
    path = tmp_path / "cg.npz"
    _stopped(path, _closure(GAMMA))
    resumed = _resumed(path, _closure(GAMMA), max_iter=20, at=3)
    x, t = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        straight = KernelRidge(kernel=_closure(GAMMA), max_iter=20, **_FIT).fit(x, t)
    assert resumed.n_iter_ == straight.n_iter_ > 3
    np.testing.assert_allclose(resumed.dual_coef_, straight.dual_coef_, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------- the arrays, verified


def _rewrite(path, change, *, digests=False):
    """Rewrite the checkpoint's arrays by ``change`` under its own metadata (``digests``:
    the digests recomputed too, a forgery consistent with itself)."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: np.array(data[name]) for name in data.files}
    meta = json.loads(bytes(arrays.pop("meta")).decode())
    change(arrays)
    if digests:
        meta["digests"] = {name: array_digest(v) for name, v in arrays.items()}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def _scale(name, factor):
    def change(arrays):
        arrays[name] = arrays[name] * factor

    return change


def _zero_converged(arrays):
    arrays["x"][:] = 0.0
    arrays["r"][:] = 0.0
    arrays["converged"][:] = True
    arrays["verified"][:] = True


def _nan(arrays):
    arrays["x"][0, 0] = np.nan


@pytest.mark.parametrize(
    ("change", "consistent", "words"),
    [
        (_scale("b_norm", 1e6), False, "integrity check: the array 'b_norm'"),
        (_scale("x", 3.0), False, "integrity check: the array 'x'"),
        (_zero_converged, False, "integrity check"),
        (_nan, False, "integrity check"),
        (_scale("b_norm", 1e6), True, "norms of the right-hand side"),
        (_nan, True, "NaN or infinity"),
        (lambda a: (_scale("b", 2.0)(a), _scale("b_norm", 2.0)(a)), True, "right-hand side"),
    ],
)
def test_an_altered_checkpoint_is_refused(tmp_path, change, consistent, words):
    path = tmp_path / "cg.npz"
    _stopped(path)
    _rewrite(path, change, digests=consistent)
    with pytest.raises(CheckpointError, match=words):
        _resumed(path)


@pytest.mark.parametrize(("version", "words"), [(2, "an older npt-dask"), (9, "a newer")])
def test_another_layout_is_refused_by_name(tmp_path, version, words):
    path = tmp_path / "cg.npz"
    _stopped(path)
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: np.array(data[name]) for name in data.files}
    meta = json.loads(bytes(arrays["meta"]).decode()) | {"version": version}
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(CheckpointError, match=f"{words} .*layout {version}"):
        _resumed(path)


def test_a_forged_converged_state_is_checked_against_the_true_residual(tmp_path):
    """Zeroed iterates and residuals flagged converged, digests recomputed: a residual
    that is not ``b - H x`` is refused; with the residual that is (``r = b`` at ``x = 0``)
    the flags are not believed and the fit reaches the true normal equations' solution."""
    path = tmp_path / "cg.npz"
    _stopped(path, tol=1e-8, gamma=GAMMA)
    _rewrite(path, _zero_converged, digests=True)
    with pytest.raises(CheckpointError, match="not of this problem"):
        _resumed(path, tol=1e-8, max_iter=200, gamma=GAMMA)
    _rewrite(path, lambda a: a["r"].__setitem__(slice(None), a["b"]), digests=True)
    est = _resumed(path, tol=1e-8, max_iter=200, gamma=GAMMA)
    x, t = _data()
    c = x[est.landmarks_]
    knm, kmm = _rbf(x, c), _rbf(c, c)
    h = knm.T @ knm + _FIT["alpha"] * kmm
    b = knm.T @ t
    true = np.linalg.norm(b - h @ est.dual_coef_, axis=0) / np.linalg.norm(b, axis=0)
    assert (true <= 1e-6).all()


# --------------------------------------------------------------- foreign and special files


def test_foreign_and_damaged_files_are_refused_and_left_as_they_are(tmp_path):
    x, t = _data()
    est = KernelRidge(max_iter=5, **_FIT)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "empty.npz").write_bytes(b"")
    np.savez(tmp_path / "other.npz", x=x)
    _stopped(tmp_path / "cg.npz")
    whole = (tmp_path / "cg.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(whole[: len(whole) // 2])
    cases = {"x.npy": "not an .npz archive", "empty.npz": "is empty",
             "other.npz": "not a readable npt-dask checkpoint",
             "cut.npz": "not a readable npt-dask checkpoint"}  # fmt: skip
    for name, words in cases.items():
        before = (tmp_path / name).read_bytes()
        with pytest.raises(CheckpointError, match=words):
            est.fit(x, t, checkpoint=tmp_path / name)
        assert (tmp_path / name).read_bytes() == before, name
    with pytest.raises(CheckpointError, match="a directory, not a file"):
        est.fit(x, t, checkpoint=tmp_path)


@pytest.mark.parametrize("value", [True, 3, 1.5, ["cg.npz"]])
def test_a_checkpoint_that_is_not_a_path_is_a_parameter_error(value):
    x, t = _data()
    with pytest.raises(InputTypeError, match="'checkpoint' parameter of KernelRidge must be"):
        KernelRidge(**_FIT).fit(x, t, checkpoint=value)


def test_a_fifo_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "cg.npz"
    os.mkfifo(fifo)
    x, t = _data()
    raised: list[BaseException] = []

    def fit():
        try:
            KernelRidge(**_FIT).fit(x, t, checkpoint=fifo)
        except BaseException as exc:  # handed to the test
            raised.append(exc)

    worker = threading.Thread(target=fit, daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():  # blocked opening the FIFO: release it, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("the fit blocked on a FIFO given as checkpoint")
    assert len(raised) == 1
    assert isinstance(raised[0], CheckpointError)
    assert "a FIFO" in str(raised[0])


def test_a_linked_checkpoint_is_written_where_the_link_points(tmp_path):
    (tmp_path / "store").mkdir()
    target = tmp_path / "store" / "cg.npz"
    link = tmp_path / "cg.npz"
    link.symlink_to(target)
    _stopped(link)
    assert link.is_symlink()
    assert target.is_file()
    assert _resumed(link, max_iter=6, at=3).n_iter_ == 6  # through the link
    assert link.is_symlink()


_HOLDER = """
import sys, time
from pathlib import Path
from npt_dask.runtime.atomic import take_lock
assert take_lock(Path(sys.argv[1])) is None
print("locked", flush=True)
time.sleep(60)
"""


def test_a_second_fit_on_a_checkpoint_in_use_is_refused(tmp_path):
    path = tmp_path / "cg.npz"
    _stopped(path)
    before = path.read_bytes()
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(tmp_path / ".cg.npz.lock")],
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(CheckpointError, match=f"in use by process {holder.pid} .*another"):
            _resumed(path)
        assert path.read_bytes() == before
    finally:
        holder.kill()
        holder.wait()
    assert _resumed(path, max_iter=5, at=3).n_iter_ == 5  # the dead holder's lock is broken
    assert not (tmp_path / ".cg.npz.lock").exists()  # and this fit's released


# --------------------------------------------------------------- landmarks drawn without a seed


def test_a_seedless_rerun_resumes_on_the_saved_landmarks(tmp_path):
    path = tmp_path / "cg.npz"
    free = {**_FIT, "random_state": None}
    first = _stopped(path, **free)
    again = _resumed(path, max_iter=20, at=3, **free)
    np.testing.assert_array_equal(again.landmarks_, first.landmarks_)
    x, t = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        given = {**free, "landmarks": first.landmarks_}
        straight = KernelRidge(kernel="rbf", max_iter=20, **given).fit(x, t)
    assert again.n_iter_ == straight.n_iter_ > 3
    np.testing.assert_allclose(again.dual_coef_, straight.dual_coef_, rtol=1e-10, atol=1e-12)


def test_the_same_ridge_command_resumes_after_a_stop(tmp_path, capsys):
    x, t = _data()
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", t[:, 0])
    args = ["ridge", str(tmp_path / "x.npy"), "--labels", str(tmp_path / "y.npy"),
            "--regression", "--kernel", "rbf", "--gamma", "0.3", "--alpha", "0.05",
            "--landmarks", "40", "--solver", "cg", "--tol", "1e-10",
            "--checkpoint", str(tmp_path / "cg.npz")]  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        assert main([*args, "--max-iter", "3", "--quiet"]) == 0
        capsys.readouterr()
        assert main([*args, "--max-iter", "8"]) == 0
    said = capsys.readouterr()
    assert "cg: resuming at iteration 3 from" in said.err
    text, decoder, runs = said.out, json.JSONDecoder(), []
    while text.strip():
        found, end = decoder.raw_decode(text.strip())
        runs.append(found["n_iter"])
        text = text.strip()[end:]
    assert runs == [8]  # on from iteration 3, on the same landmarks


def test_the_direct_route_leaves_no_checkpoint_and_no_lock(tmp_path):
    x, t = _data()
    KernelRidge(alpha=0.1, landmarks=40, solver="direct", random_state=0).fit(
        x, t, checkpoint=tmp_path / "cg.npz"
    )
    assert not list(tmp_path.iterdir())
