"""npt-dask on one GPU beside a plain CuPy script of the same maths (the floor), in one run.

At start-up the device's GEMM rate is measured (float32 and float64, CuPy). Then each
job runs twice on the same rows in this process: the floor (CuPy alone: the kernel on
the device, dense or streamed in row blocks, and cuSOLVER) and npt-dask's route with the
rows' chunks on the device (``to_device(x, "gpu")``). Each job prints one JSON object:
seconds, accuracy (or eigenvalue agreement and residual), the ratio to the floor, the
share of the GEMM rate, the CuPy pool's high-water mark, and the issue's targets (met or
not; they apply at the full sizes).

Jobs (``--list`` prints this table with the sizes, targets and flop estimates):

* ``exact_ridge``: exact kernel ridge, MNIST 60,000 train / 10,000 test, gamma 0.02,
  alpha 0.01 (floor: K on the device in float64, Cholesky, two triangular solves);
  target >= 98.8 % in <= 10 s;
* ``nystrom_ridge``: Nystrom kernel ridge on 10^6 deformed MNIST rows
  (``npt_dask.storage.datasets.deformed_mnist``, seed 0, generated on the host first;
  ``--rows`` reads rows written by ``benchmarks/make_mnist1m.py``), m = 50,000 uniform
  landmarks, float64 (floor: the m x m normal matrix streamed over row blocks,
  Cholesky); target >= 99.0 % in <= 150 s;
* ``kpca60k``: exact kernel PCA of 60,000 MNIST rows, r = 100 (floor: the centred K on
  the device, ``cupyx.scipy.sparse.linalg.eigsh``);
* ``kpca250k``: exact kernel PCA of 250,000 deformed rows, r = 100 (floor: block subspace
  iteration, the centred K streamed in row blocks, never held); target <= 180 s;
* ``pass``: one streamed pass ``K(X, X) @ V``, n = 200,000, V n x 128, float32.

Every route's target is also <= 1.5 x its floor.

    NPT_DATA_DIR=../shared/data python benchmarks/gpu.py --quick --store results/gpu-quick
    NPT_DATA_DIR=../shared/data python benchmarks/gpu.py --job nystrom_ridge --store results/gpu
    python benchmarks/gpu.py --summary results/gpu      # stored jobs against the targets
    python benchmarks/gpu.py --list                     # jobs, sizes, targets, estimates

``--quick`` runs every job at a size that runs in seconds on an H100 (the same code
paths and parameters, fewer rows and landmarks; the whole run within 4 minutes);
the full jobs take longer, so run one per call (``--job NAME``) and keep each one's
JSON with ``--store DIR`` (``DIR/NAME.json``). ``--side floor`` or ``--side npt`` runs
one side only; a second call with the other side completes the stored job. Without
CuPy or a CUDA device it says so and exits with status 2 (``--list`` and ``--summary``
need neither).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GAMMA = 0.02
ALPHA = 0.01
NYSTROM_ALPHA = 1e-3
RATIO_MAX = 1.5
"""Every route's target: at most this many times its floor's seconds."""

NOMINAL = {"float64": 50e12, "float32": 50e12, "bytes": 3.0e12}
"""An H100's rates for the estimates (FLOP/s of DGEMM and SGEMM as cuBLAS reaches them,
HBM bytes/s): estimates only; a run measures its own GEMM rate."""

SMOKE_ARGS = ["--list"]


@dataclass(frozen=True)
class Job:
    """One benchmark job: its rows at full size and in ``--quick``, the landmarks of a
    Nystrom job, and the targets that hold at full size."""

    name: str
    what: str
    full: int
    quick: int
    m: tuple[int, int] | None = None  # (full, quick) landmarks
    targets: Mapping[str, float] = field(default_factory=dict)


JOB_TABLE = (
    Job("exact_ridge", "exact kernel ridge, MNIST rows, float64, direct", 60_000, 20_000,
        targets={"accuracy_min": 0.988, "seconds_max": 10.0}),
    Job("nystrom_ridge", "Nystrom kernel ridge, deformed MNIST rows, float64, direct",
        1_000_000, 100_000, m=(50_000, 10_000),
        targets={"accuracy_min": 0.990, "seconds_max": 150.0}),
    Job("kpca60k", "exact kernel PCA, MNIST rows, r = 100, float64, K held", 60_000, 20_000),
    Job("kpca250k", "exact kernel PCA, deformed rows, r = 100, float32 blocks, streamed",
        250_000, 50_000, targets={"seconds_max": 180.0}),
    Job("pass", "one streamed pass K(X, X) @ V, V n x 128, float32", 200_000, 50_000),
)  # fmt: skip
JOBS = {job.name: job for job in JOB_TABLE}
SIDES = ("floor", "npt")


def _cupy() -> Any:
    """CuPy with a CUDA device, or the reason why not and exit status 2."""
    from npt_dask.arrays.device import cupy_or_refuse
    from npt_dask.errors import DeviceError

    try:
        return cupy_or_refuse()
    except DeviceError as exc:
        print(f"benchmarks/gpu.py needs CuPy and a CUDA GPU: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _timed(cp: Any, func: Callable[[], Any]) -> tuple[Any, float]:
    cp.cuda.Device().synchronize()
    start = time.perf_counter()
    out = func()
    cp.cuda.Device().synchronize()
    return out, time.perf_counter() - start


def device_gemm_rate(cp: Any, dtype: str, size: int = 8192, repeat: int = 3) -> float:
    """Measured matrix-product rate of the device, GFLOP/s (best of ``repeat``)."""
    a = cp.random.random((size, size)).astype(dtype)
    b = cp.random.random((size, size)).astype(dtype)
    cp.matmul(a, b)  # warm-up: cuBLAS handles, the memory pool
    best = min(_timed(cp, lambda: cp.matmul(a, b))[1] for _ in range(repeat))
    return 2.0 * size**3 / best / 1e9


def _rbf(cp: Any, a: Any, b: Any, gamma: float) -> Any:
    """``exp(-gamma |a_i - b_j|^2)`` on the device, in the rows' dtype."""
    k = a @ b.T
    k *= 2.0 * gamma
    k -= gamma * (a * a).sum(axis=1)[:, None]
    k -= gamma * (b * b).sum(axis=1)[None, :]
    cp.minimum(k, 0.0, out=k)
    return cp.exp(k, out=k)


def _blocks(n: int, size: int) -> list[slice]:
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def _signs(y: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """One column a class, +1 for the class and -1 for the others (RidgeClassifier's)."""
    return np.where(y[:, None] == classes[None, :], 1.0, -1.0)


# --- sizes and estimates ---------------------------------------------------------------------


def job_sizes(job: Job, args: argparse.Namespace) -> dict[str, int]:
    """Rows (and landmarks, components, passes) of ``job`` in this run."""
    n = args.n or (job.quick if args.quick else job.full)
    sizes = {"n": n}
    if job.m is not None:
        sizes["m"] = min(args.m or job.m[1 if args.quick else 0], n // 2)
    if job.name.startswith("kpca"):
        sizes["r"] = min(args.r, n // 4)
    if job.name == "kpca250k":
        sizes["passes"] = args.passes
    if job.name == "pass":
        sizes["width"] = args.width
    return sizes


def estimate(job: Job, sizes: Mapping[str, int], d: int = 784, classes: int = 10,
             n_test: int = 10_000) -> dict[str, Any]:  # fmt: skip
    """The floor's dominant work in ``job`` and its seconds at :data:`NOMINAL` (an H100's
    rates): its products' flops, and the bytes of its elementwise passes over kernel
    entries (``_rbf``: about six reads and writes of each) and of reading a held K
    (an estimate to plan a run with, not a measurement)."""
    n = sizes["n"]
    if job.name == "exact_ridge":
        dtype = "float64"
        flops = 2 * n * n * d + n**3 / 3 + 4 * n * n * classes + 2 * n_test * n * (d + classes)
        entries, reads = n * n + n_test * n, 0
    elif job.name == "nystrom_ridge":
        dtype, m = "float64", sizes["m"]
        flops = 2 * n * m * (d + m) + 2 * m * m * d + m**3 / 3 + 2 * n_test * m * d
        entries, reads = n * m + m * m + n_test * m, 0
    elif job.name == "kpca60k":  # K, then Lanczos: some 5 r products with the held K
        dtype, products = "float64", 5 * sizes["r"]
        flops = 2 * n * n * d + products * 2 * n * n
        entries, reads = n * n, products * n * n
    elif job.name == "kpca250k":  # the row sums, then passes + 1 products with r + 20 columns
        dtype, passes = "float32", sizes["passes"] + 2
        flops = passes * 2 * n * n * (d + sizes["r"] + 20)
        entries, reads = passes * n * n, 0
    else:
        dtype = "float32"
        flops = 2 * n * n * (d + sizes["width"])
        entries, reads = n * n, 0
    itemsize = 8 if dtype == "float64" else 4
    moved = (12 * entries + reads) * itemsize
    seconds = flops / NOMINAL[dtype] + moved / NOMINAL["bytes"]
    return {"gflop": round(flops / 1e9, 1), "dtype": dtype, "floor_seconds_h100": round(seconds, 2)}


def full_size(job: Job, sizes: Mapping[str, int]) -> bool:
    """Whether ``sizes`` are the job's full ones (where the issue's targets apply)."""
    return dict(sizes) == job_sizes(job, _parser().parse_args([]))


def job_table() -> dict[str, Any]:
    """The jobs, each at full and quick size, with its targets and the floor's estimate."""
    table: dict[str, Any] = {}
    for job in JOB_TABLE:
        entry: dict[str, Any] = {"what": job.what, "targets": dict(job.targets),
                                 "ratio_to_floor_max": RATIO_MAX}  # fmt: skip
        for mode in ("full", "quick"):
            sizes = job_sizes(job, _parser().parse_args(["--quick"] if mode == "quick" else []))
            entry[mode] = {**sizes, "estimate": estimate(job, sizes)}
        table[job.name] = entry
    quick = sum(e["quick"]["estimate"]["floor_seconds_h100"] for e in table.values())
    return {"jobs": table, "quick_floors_seconds_h100": round(quick, 1)}


# --- data -----------------------------------------------------------------------------------


def _mnist(n_train: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The first ``n_train`` MNIST training rows and the 10,000 test rows, in [0, 1]."""
    from npt_dask.storage.datasets import data_path, load_npz

    x, y = load_npz(data_path("mnist.npz"), scale=255.0, dtype=np.float32)
    return x[:n_train], y[:n_train], x[60_000:70_000], y[60_000:70_000]


def _deformed(n: int, rows: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` deformed rows (seed 0; the first 60,000 are MNIST's training rows),
    in host memory: the floor (a plain CuPy script) holds them whole, and npt-dask's route
    takes the same array in row chunks (``to_device``), so neither side's time includes
    generating or reading them."""
    if rows is not None:
        import xarray as xr

        ds = xr.open_zarr(rows)
        return np.asarray(ds["x"].data[:n], np.float32), np.asarray(ds["y"].data[:n])
    from npt_dask.storage.datasets import data_path, deformed_mnist, load_npz

    x0, y0 = load_npz(data_path("mnist.npz"), rows=slice(0, 60_000), scale=255.0)
    x, y = deformed_mnist(x0, y0, max(n, 60_000), seed=0)
    x, y = x[:n], y[:n]
    return np.asarray(x.compute(), np.float32), np.asarray(y.compute())


# --- the floors: CuPy alone -------------------------------------------------------------------


def floor_exact_ridge(cp: Any, xtr: Any, ytr: np.ndarray, xte: Any, gamma: float,
                      alpha: float) -> np.ndarray:  # fmt: skip
    """Predicted classes of ``xte``: K + alpha I factored by Cholesky in float64."""
    from cupyx.scipy.linalg import solve_triangular

    classes = np.unique(ytr)
    x = cp.asarray(xtr, dtype=cp.float64)
    k = _rbf(cp, x, x, gamma)
    k[cp.arange(len(x)), cp.arange(len(x))] += alpha
    low = cp.linalg.cholesky(k)
    del k
    t = cp.asarray(_signs(ytr, classes))
    c = solve_triangular(low, solve_triangular(low, t, lower=True), lower=True, trans="T")
    del low
    scores = _rbf(cp, cp.asarray(xte, dtype=cp.float64), x, gamma) @ c
    return classes[cp.asnumpy(scores.argmax(axis=1))]


def floor_nystrom_ridge(cp: Any, xtr: np.ndarray, ytr: np.ndarray, xte: np.ndarray, m: int,
                        gamma: float, alpha: float, block: int) -> np.ndarray:  # fmt: skip
    """Nystrom ridge: (K_nm^T K_nm + alpha K_mm) c = K_nm^T T, streamed over row blocks."""
    from cupyx.scipy.linalg import solve_triangular

    classes = np.unique(ytr)
    centres = np.random.default_rng(0).choice(len(xtr), size=m, replace=False)
    c_dev = cp.asarray(xtr[np.sort(centres)], dtype=cp.float64)
    h = alpha * _rbf(cp, c_dev, c_dev, gamma)
    b = cp.zeros((m, len(classes)))
    for rows in _blocks(len(xtr), block):
        knm = _rbf(cp, cp.asarray(xtr[rows], dtype=cp.float64), c_dev, gamma)
        h += knm.T @ knm
        b += knm.T @ cp.asarray(_signs(ytr[rows], classes))
    h[cp.arange(m), cp.arange(m)] += 1e-10 * float(cp.trace(h)) / m  # rounding's floor
    low = cp.linalg.cholesky(h)
    del h
    coef = solve_triangular(low, solve_triangular(low, b, lower=True), lower=True, trans="T")
    scores = _rbf(cp, cp.asarray(xte, dtype=cp.float64), c_dev, gamma) @ coef
    return classes[cp.asnumpy(scores.argmax(axis=1))]


def floor_kpca_dense(cp: Any, x: np.ndarray, r: int, gamma: float) -> tuple[np.ndarray, float]:
    """Top ``r`` eigenvalues of the centred K (held on the device) and the largest
    relative residual of the top ten, ``||K v - lambda v|| / lambda_1``."""
    from cupyx.scipy.sparse.linalg import eigsh

    xd = cp.asarray(x, dtype=cp.float64)
    k = _rbf(cp, xd, xd, gamma)
    means = k.mean(axis=0)
    k -= means[None, :]
    k -= means[:, None] - means.mean()
    lam, vec = eigsh(k, k=r, which="LA")
    order = cp.argsort(lam)[::-1]
    lam, vec = lam[order], vec[:, order]
    top = min(10, r)
    res = cp.linalg.norm(k @ vec[:, :top] - vec[:, :top] * lam[:top], axis=0) / lam[0]
    return cp.asnumpy(lam), float(res.max())


def _streamed_kv(cp: Any, x: Any, v: Any, gamma: float, block: int) -> Any:
    """``K(X, X) @ v``, the kernel evaluated in row blocks and never held."""
    out = cp.empty((x.shape[0], v.shape[1]), dtype=v.dtype)
    for rows in _blocks(x.shape[0], block):
        out[rows] = _rbf(cp, x[rows], x, gamma) @ v
    return out


def floor_kpca_streamed(cp: Any, x: np.ndarray, r: int, gamma: float, passes: int,
                        block: int) -> tuple[np.ndarray, float]:  # fmt: skip
    """Block subspace iteration on the centred K (float32 blocks, float64 bases), ``passes``
    passes then Rayleigh-Ritz: the top ``r`` eigenvalues and the top ten's residual."""
    xd = cp.asarray(x, dtype=cp.float32)
    n, width = len(x), r + 20
    ones = cp.ones((n, 1), dtype=cp.float32)
    row_sums = _streamed_kv(cp, xd, ones, gamma, block)[:, 0].astype(cp.float64)
    grand = float(row_sums.sum()) / n**2

    def centred(v: Any) -> Any:
        kv = _streamed_kv(cp, xd, v.astype(cp.float32), gamma, block).astype(cp.float64)
        col = v.sum(axis=0)[None, :]
        return kv - (row_sums[:, None] @ col) / n - cp.ones((n, 1)) @ (row_sums @ v)[None] / n \
            + grand * cp.ones((n, 1)) @ col  # fmt: skip

    cp.random.seed(0)
    v = cp.linalg.qr(cp.random.standard_normal((n, width)))[0]
    for _ in range(passes - 1):
        v = cp.linalg.qr(centred(v))[0]
    w = centred(v)
    lam, s = cp.linalg.eigh(v.T @ w)
    order = cp.argsort(lam)[::-1][:r]
    lam, s = lam[order], s[:, order]
    top = min(10, r)
    res = cp.linalg.norm((w @ s[:, :top]) - (v @ s[:, :top]) * lam[:top], axis=0) / lam[0]
    return cp.asnumpy(lam), float(res.max())


# --- npt-dask's routes ----------------------------------------------------------------------


def _on_device(x: np.ndarray, chunk: int) -> Any:
    from npt_dask.arrays.device import to_device

    return to_device(x, "gpu", chunk_rows=chunk)


def _host(a: Any) -> np.ndarray:
    from npt_dask.arrays.namespace import to_numpy

    return to_numpy(a.compute() if hasattr(a, "compute") else a)


def npt_ridge(xtr: np.ndarray, ytr: np.ndarray, xte: np.ndarray, chunk: int,
              **params: Any) -> tuple[np.ndarray, dict[str, Any]]:  # fmt: skip
    """Predicted classes of ``xte``, and the route the fit took."""
    import npt_dask as npt

    clf = npt.KernelRidgeClassifier(kernel="rbf", gamma=GAMMA, precision="float64",
                                    progress=False, **params)  # fmt: skip
    clf.fit(_on_device(xtr, chunk), ytr)
    phases = {k: round(float(v), 3) for k, v in clf.fit_seconds_.items()}
    route = {"solver": clf.solver_, "iterations": int(clf.n_iter_), "phases_seconds": phases}
    return _host(clf.predict(_on_device(xte, chunk))), route


def npt_kpca(x: np.ndarray, r: int, chunk: int,
             precision: str) -> tuple[tuple[np.ndarray, float], dict[str, Any]]:  # fmt: skip
    """The top ``r`` eigenvalues and the top ten's largest residual ``||K u - lambda u|| /
    lambda_1`` (the floor's measure), and the route the fit took."""
    import npt_dask as npt

    model = npt.fit(_on_device(x, chunk), kernel="rbf", gamma=GAMMA, n_components=r,
                    precision=precision, progress=False)  # fmt: skip
    found = model.diagnostics
    residuals = np.asarray(found.residuals, dtype=np.float64)[:10]
    route = {"solver": found.solver, "passes": int(found.passes), "cache": found.cache,
             "converged": bool(found.converged)}  # fmt: skip
    return (np.asarray(model.eigenvalues), float(residuals.max(initial=0.0))), route


def npt_pass(x: np.ndarray, v: np.ndarray, chunk: int) -> np.ndarray:
    from npt_dask.engine.operator import KernelOperator
    from npt_dask.kernels import make_kernel

    op = KernelOperator(_on_device(x, chunk), make_kernel("rbf", gamma=GAMMA), center=False,
                        cache="recompute", products=np.float32)  # fmt: skip
    return _host(op.uncentered_matmat(v))


# --- running a side -----------------------------------------------------------------------------


def _where(exc: BaseException) -> str | None:
    """``path:line function`` of the innermost npt_dask frame of ``exc``'s traceback."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "npt_dask" in f.filename]
    if not frames:
        return None
    frame = frames[-1]
    path = frame.filename[frame.filename.rindex("npt_dask") :]
    return f"{path}:{frame.lineno} {frame.name}"


def _route(cp: Any, func: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """``func()`` timed on the device from an emptied CuPy pool; an error is reported, not
    raised (a route that does not run on the device yet says why and where).
    ``device_pool_gib``: what CuPy's pool held at the end (its cached blocks too): the
    side's device peak, unless the pool released blocks under memory pressure."""
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    try:
        out, seconds = _timed(cp, func)
        entry: dict[str, Any] = {"seconds": round(seconds, 3)}
    except Exception as exc:
        out, entry = None, {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
        if (where := _where(exc)) is not None:
            entry["where"] = where
    entry["device_pool_gib"] = round(pool.total_bytes() / 2**30, 2)
    pool.free_all_blocks()
    return out, entry


def _share_of_gemm(report: dict[str, Any], rates: Mapping[str, float]) -> None:
    gflop, dtype = report["estimate"]["gflop"], report["estimate"]["dtype"]
    for side in SIDES:
        entry = report.get(side, {})
        if "seconds" in entry and entry["seconds"] > 0:
            entry["share_of_gemm"] = round(gflop / entry["seconds"] / rates[dtype], 3)


# --- the jobs -------------------------------------------------------------------------------


def job_ridge(cp: Any, args: argparse.Namespace, sizes: Mapping[str, int],
              nystrom: bool) -> dict[str, Any]:  # fmt: skip
    n, started = sizes["n"], time.perf_counter()
    xtr, ytr, xte, yte = _mnist(0 if nystrom else n)
    if nystrom:
        xtr, ytr = _deformed(n, args.rows)
    m = sizes.get("m")
    alpha = args.nystrom_alpha if nystrom else ALPHA
    report: dict[str, Any] = {**sizes, "n_test": len(xte), "gamma": GAMMA, "alpha": alpha,
                              "data_seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    params = {"alpha": alpha, "solver": args.solver}
    params |= {"landmarks": m, "random_state": 0} if nystrom else {}

    def floor() -> tuple[np.ndarray, None]:
        if nystrom:
            return floor_nystrom_ridge(cp, xtr, ytr, xte, m, GAMMA, alpha, args.block), None
        return floor_exact_ridge(cp, xtr, ytr, xte, GAMMA, alpha), None

    sides = {"floor": floor, "npt": lambda: npt_ridge(xtr, ytr, xte, args.chunk, **params)}
    for name in _sides(args):
        out, entry = _route(cp, sides[name])
        if out is not None:
            pred, route = out
            entry["accuracy"] = round(float(np.mean(pred == yte)), 5)
            if route is not None:
                entry["route"] = route
        report[name] = entry
    return report


def job_kpca(cp: Any, args: argparse.Namespace, sizes: Mapping[str, int],
             streamed: bool) -> dict[str, Any]:  # fmt: skip
    n, r, started = sizes["n"], sizes["r"], time.perf_counter()
    x = _deformed(n, args.rows)[0] if streamed else _mnist(n)[0]
    report: dict[str, Any] = {**sizes, "gamma": GAMMA,
                              "data_seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    if streamed:
        floor = lambda: floor_kpca_streamed(cp, x, r, GAMMA, args.passes, args.block)  # noqa: E731
    else:
        floor = lambda: floor_kpca_dense(cp, x, r, GAMMA)  # noqa: E731
    precision = "float32" if streamed else "float64"
    found = ours = None
    if "floor" in _sides(args):
        found, report["floor"] = _route(cp, floor)
        if found is not None:
            report["floor"]["top10_residual"] = found[1]
    if "npt" in _sides(args):
        out, report["npt"] = _route(cp, lambda: npt_kpca(x, r, args.chunk, precision))
        if out is not None:
            ours, report["npt"]["route"] = out
            report["npt"]["top10_residual"] = ours[1]
            report["npt"]["eigenvalues_top10"] = [float(v) for v in ours[0][:10]]
    if found is not None:
        report["floor"]["eigenvalues_top10"] = [float(v) for v in found[0][:10]]
    return report


def job_pass(cp: Any, args: argparse.Namespace, sizes: Mapping[str, int]) -> dict[str, Any]:
    n, started = sizes["n"], time.perf_counter()
    x = _deformed(n, args.rows)[0] if n > 60_000 else _mnist(n)[0]
    v = np.random.default_rng(0).standard_normal((n, args.width)).astype(np.float32)
    report: dict[str, Any] = {**sizes, "d": x.shape[1],
                              "data_seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    # the same work timed on both sides: host rows and V in, K V back on the host, after
    # a warm-up of each
    _streamed_kv(cp, cp.asarray(x[: args.block]), cp.asarray(v[: args.block]), GAMMA, args.block)
    with contextlib.suppress(Exception):  # a route that fails says so in its timed run
        npt_pass(x[: args.chunk], v[: args.chunk], args.chunk)

    def floor() -> np.ndarray:
        return cp.asnumpy(_streamed_kv(cp, cp.asarray(x), cp.asarray(v), GAMMA, args.block))

    sides = {"floor": floor, "npt": lambda: npt_pass(x, v, args.chunk)}
    outs = {}
    for name in _sides(args):
        outs[name], report[name] = _route(cp, sides[name])
    if outs.get("npt") is not None and outs.get("floor") is not None:
        ref = np.asarray(outs["floor"])
        diff = np.max(np.abs(outs["npt"] - ref)) / np.max(np.abs(ref))
        report["npt"]["rel_diff_max"] = float(diff)
    return report


def _sides(args: argparse.Namespace) -> tuple[str, ...]:
    return SIDES if args.side == "both" else (args.side,)


def run_job(cp: Any, name: str, args: argparse.Namespace,
            rates: Mapping[str, float]) -> dict[str, Any]:  # fmt: skip
    job = JOBS[name]
    sizes = job_sizes(job, args)
    if name in ("exact_ridge", "nystrom_ridge"):
        report = job_ridge(cp, args, sizes, nystrom=name == "nystrom_ridge")
    elif name in ("kpca60k", "kpca250k"):
        report = job_kpca(cp, args, sizes, streamed=name == "kpca250k")
    else:
        report = job_pass(cp, args, sizes)
    report["estimate"] = estimate(job, sizes)
    _share_of_gemm(report, rates)
    return judge(name, report)


# --- the targets and the stored jobs ----------------------------------------------------------


def judge(name: str, report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with its ratio to the floor and ``targets``: each of the job's targets
    with the value found and whether it is met (None: not measured); ``applies`` is False
    away from the full sizes, where the targets are not the issue's."""
    job = JOBS[name]
    floor, ours = report.get("floor", {}), report.get("npt", {})
    if "seconds" in floor and "seconds" in ours:
        ours["ratio_to_floor"] = round(ours["seconds"] / max(floor["seconds"], 1e-9), 3)
    limits = {**job.targets, "ratio_to_floor_max": RATIO_MAX}
    found = {"accuracy_min": ours.get("accuracy"), "seconds_max": ours.get("seconds"),
             "ratio_to_floor_max": ours.get("ratio_to_floor")}  # fmt: skip
    sizes = {k: report[k] for k in job_sizes(job, _parser().parse_args([])) if k in report}
    targets: dict[str, Any] = {"applies": full_size(job, sizes)}
    for key, limit in limits.items():
        value = found[key]
        met = None if value is None else (value >= limit if key.endswith("min") else value <= limit)
        targets[key] = {"limit": limit, "value": value, "met": met}
    report["targets"] = targets
    return report


def store_job(directory: str | os.PathLike, name: str, report: dict[str, Any],
              header: Mapping[str, Any]) -> Path:  # fmt: skip
    """Write ``DIR/NAME.json`` (the run's header and the job), keeping a side that an
    earlier call stored at the same sizes and this call did not run (with that call's
    header beside it); atomic (a killed call leaves the earlier file whole)."""
    path = Path(directory) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    merged = dict(report)
    sizes = job_sizes(JOBS[name], _parser().parse_args([]))
    if path.exists():
        earlier = json.loads(path.read_text())
        job = earlier.get("job", {})
        if all(job.get(k) == report.get(k) for k in sizes):
            for side in SIDES:
                if side not in merged and side in job:
                    merged[side] = {**job[side], "call": job[side].get("call", earlier["header"])}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({"header": dict(header), "job": judge(name, merged)}, indent=2))
    os.replace(tmp, path)
    return path


def summary(directory: str | os.PathLike) -> list[str]:
    """One line per stored job: each side's seconds and accuracy, and each target."""
    lines = []
    for path in sorted(Path(directory).glob("*.json")):
        stored = json.loads(path.read_text())
        header, job = stored["header"], stored["job"]
        words = [f"{path.stem} n={job.get('n')}"]
        for side in SIDES:
            entry = job.get(side, {})
            if "error" in entry:
                words.append(f"{side}: {entry['error'][:80]} at {entry.get('where')}")
            elif "seconds" in entry:
                acc = f" {entry['accuracy']:.2%}" if "accuracy" in entry else ""
                words.append(f"{side} {entry['seconds']:.1f}s{acc}")
        targets = job.get("targets", {})
        scope = "targets" if targets.get("applies") else "targets (quick size: not the issue's)"
        checks = [f"{k} {v['value']} vs {v['limit']}: {_met(v['met'])}"
                  for k, v in targets.items() if k != "applies"]  # fmt: skip
        lines.append(f"{'; '.join(words)} | {scope}: {', '.join(checks)} [{header.get('device')}]")
    return lines


def _met(met: bool | None) -> str:
    return {True: "met", False: "MISSED", None: "not measured"}[met]


# --- the command line -----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--job", action="append", choices=list(JOBS), help="one job (repeatable)")
    parser.add_argument("--jobs", help=f"comma-separated, of {', '.join(JOBS)} (default: all)")
    parser.add_argument("--quick", action="store_true", help="every job small (<= 4 min, H100)")
    parser.add_argument("--side", choices=("both", *SIDES), default="both",
                        help="run the floor, npt-dask's route, or both (default)")  # fmt: skip
    parser.add_argument("--store", help="folder: write each job's JSON to STORE/JOB.json")
    parser.add_argument("--summary", metavar="DIR", help="print the stored jobs against targets")
    parser.add_argument("--list", action="store_true", help="print the job table and exit")
    parser.add_argument("--n", type=int, help="rows of every job picked (default: each job's)")
    parser.add_argument("--rows", help="deformed rows from make_mnist1m.py (default: generate)")
    parser.add_argument("--m", type=int, help="Nystrom landmarks (default 50,000; quick 10,000)")
    parser.add_argument("--solver", default="direct", choices=("direct", "cg", "auto"),
                        help="npt-dask's ridge solver (default: direct, the floor's)")  # fmt: skip
    parser.add_argument("--nystrom-alpha", type=float, default=NYSTROM_ALPHA)
    parser.add_argument("--r", type=int, default=100, help="kernel PCA components")
    parser.add_argument("--passes", type=int, default=9, help="subspace iterations (streamed)")
    parser.add_argument("--width", type=int, default=128, help="columns of V in the pass job")
    parser.add_argument("--block", type=int, default=8192, help="rows a block of the floors")
    parser.add_argument("--chunk", type=int, default=8192, help="rows a chunk of npt's routes")
    return parser


def selected_jobs(args: argparse.Namespace) -> list[str]:
    """The jobs asked for (``--job``, ``--jobs``; all by default), checked."""
    names = list(args.job or [])
    names += [j.strip() for j in (args.jobs or "").split(",") if j.strip()]
    unknown = sorted(set(names) - set(JOBS))
    if unknown:
        raise SystemExit(f"benchmarks/gpu.py: unknown jobs {unknown}; pick from {list(JOBS)}.")
    return list(dict.fromkeys(names)) or list(JOBS)


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.list:
        print(json.dumps(job_table(), indent=2))
        return
    if args.summary:
        print("\n".join(summary(args.summary)) or f"no stored jobs in {args.summary}")
        return
    jobs = selected_jobs(args)
    cp = _cupy()
    started = time.perf_counter()
    rates = {dtype: device_gemm_rate(cp, dtype) for dtype in ("float32", "float64")}
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"]
    header: dict[str, Any] = {
        "device": name.decode() if isinstance(name, bytes) else str(name),
        "gemm_gflops": {k: round(v, 1) for k, v in rates.items()},
        "quick": args.quick or args.n is not None,
        "side": args.side,
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    report: dict[str, Any] = {**header, "jobs": {}}
    for job in jobs:
        result = run_job(cp, job, args, rates)
        report["jobs"][job] = result
        print(json.dumps({job: result}), file=sys.stderr, flush=True)  # each as it finishes
        if args.store:
            store_job(args.store, job, result, header)
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
