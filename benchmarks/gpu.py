"""npt-dask on one GPU beside a plain CuPy script of the same maths (the floor), in one run.

At start-up the device's GEMM rate is measured (float32 and float64, CuPy). Then each
job runs twice on the same rows in this process: the floor (CuPy alone: the kernel on
the device, dense or streamed in row blocks, and cuSOLVER) and npt-dask's route with the
rows' chunks on the device (``to_device(x, "gpu")``). Reported per job and route:
seconds, accuracy (or eigenvalue agreement and residual), the ratio to the floor, and
the kernel pass's rate against the GEMM rate.

Jobs (``--jobs``, default all):

* ``exact_ridge``: exact kernel ridge, MNIST 60,000 train / 10,000 test, gamma 0.02,
  alpha 0.01 (floor: K on the device in float64, Cholesky, two triangular solves);
* ``nystrom_ridge``: Nystrom kernel ridge on the deformed MNIST rows
  (``npt_dask.storage.datasets.deformed_mnist``, seed 0; ``--store`` reads rows written
  by ``benchmarks/make_mnist1m.py``), m = 50,000 uniform landmarks, float64 (floor: the
  m x m normal matrix streamed over row blocks, Cholesky);
* ``kpca60k``: exact kernel PCA of 60,000 MNIST rows, r = 100 (floor: the centred K on
  the device, ``cupyx.scipy.sparse.linalg.eigsh``);
* ``kpca250k``: exact kernel PCA of 250,000 deformed rows, r = 100 (floor: block subspace
  iteration, the centred K streamed in row blocks, never held);
* ``pass``: one streamed pass ``K(X, X) @ V``, n = 200,000, V n x 128, float32.

    NPT_DATA_DIR=../shared/data python benchmarks/gpu.py [--jobs exact_ridge,pass] \\
        [--n 60000] [--quick] [--store results/mnist1m.zarr]

``--quick`` is a smoke run of every job at a few thousand rows (the code paths, not
the figures). Without CuPy or a CUDA device it says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GAMMA = 0.02
ALPHA = 0.01
JOBS = ("exact_ridge", "nystrom_ridge", "kpca60k", "kpca250k", "pass")
FULL = {"exact_ridge": 60_000, "nystrom_ridge": 1_000_000, "kpca60k": 60_000,
        "kpca250k": 250_000, "pass": 200_000}  # fmt: skip
QUICK = {"exact_ridge": 2_000, "nystrom_ridge": 4_000, "kpca60k": 2_000,
         "kpca250k": 4_000, "pass": 4_000}  # fmt: skip


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


# --- data -----------------------------------------------------------------------------------


def _mnist(n_train: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from npt_dask.storage.datasets import data_path, load_npz

    x, y = load_npz(data_path("mnist.npz"), scale=255.0, dtype=np.float32)
    n_test = min(10_000, max(1, n_train // 6))
    return x[:n_train], y[:n_train], x[60_000 : 60_000 + n_test], y[60_000 : 60_000 + n_test]


def _deformed(n: int, store: str | None) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` deformed rows (seed 0), in host memory: the floor (a plain CuPy
    script) holds them whole, and npt-dask's route takes the same array in row chunks
    (``to_device``), so neither side's time includes generating or reading them."""
    if store is not None:
        import xarray as xr

        ds = xr.open_zarr(store)
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
              **params: Any) -> np.ndarray:  # fmt: skip
    import npt_dask as npt

    clf = npt.KernelRidgeClassifier(kernel="rbf", gamma=GAMMA, precision="float64",
                                    progress=False, **params)  # fmt: skip
    clf.fit(_on_device(xtr, chunk), ytr)
    return _host(clf.predict(_on_device(xte, chunk)))


def npt_kpca(x: np.ndarray, r: int, chunk: int, precision: str) -> tuple[np.ndarray, float]:
    """The top ``r`` eigenvalues and the top ten's largest residual ``||K u - lambda u|| /
    lambda_1`` (the floor's measure)."""
    import npt_dask as npt

    model = npt.fit(_on_device(x, chunk), kernel="rbf", gamma=GAMMA, n_components=r,
                    precision=precision, progress=False)  # fmt: skip
    residuals = np.asarray(model.diagnostics.residuals, dtype=np.float64)[:10]
    return np.asarray(model.eigenvalues), float(residuals.max(initial=0.0))


def npt_pass(x: np.ndarray, v: np.ndarray, chunk: int) -> np.ndarray:
    from npt_dask.engine.operator import KernelOperator
    from npt_dask.kernels import make_kernel

    op = KernelOperator(_on_device(x, chunk), make_kernel("rbf", gamma=GAMMA), center=False,
                        cache="recompute", products=np.float32)  # fmt: skip
    return _host(op.uncentered_matmat(v))


# --- the jobs -------------------------------------------------------------------------------


def _route(cp: Any, func: Callable[[], Any]) -> tuple[Any, dict[str, Any]]:
    """``func()`` timed on the device; an error is reported, not raised (a route that does
    not run on the device yet says why)."""
    try:
        out, seconds = _timed(cp, func)
    except Exception as exc:
        return None, {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return out, {"seconds": round(seconds, 3)}


def _compare(floor: dict[str, Any], ours: dict[str, Any]) -> None:
    if "seconds" in floor and "seconds" in ours:
        ours["ratio_to_floor"] = round(ours["seconds"] / floor["seconds"], 3)


def _pass_rate(n: int, d: int, width: int, seconds: float, passes: int, gemm: float) -> float:
    """Share of the GEMM rate a kernel pass runs at (2 n^2 d for the block, 2 n^2 b for
    the product, per pass)."""
    flops = passes * 2.0 * n * n * (d + width)
    return round(flops / seconds / 1e9 / gemm, 3)


def job_ridge(cp: Any, args: argparse.Namespace, n: int, nystrom: bool) -> dict[str, Any]:
    if nystrom:
        xtr, ytr = _deformed(n, args.store)
        _, _, xte, yte = _mnist(60_000 if n >= 60_000 else n)
    else:
        xtr, ytr, xte, yte = _mnist(n)
    m = min(args.m, n // 2) if nystrom else None
    alpha = args.nystrom_alpha if nystrom else ALPHA

    def floor() -> np.ndarray:
        if nystrom:
            return floor_nystrom_ridge(cp, xtr, ytr, xte, m, GAMMA, alpha, args.block)
        return floor_exact_ridge(cp, xtr, ytr, xte, GAMMA, alpha)

    params = {"alpha": alpha} | ({"landmarks": m, "random_state": 0} if nystrom else {})
    report: dict[str, Any] = {"n": n, "n_test": len(xte), "gamma": GAMMA, "alpha": alpha}
    if m is not None:
        report["m"] = m
    ours = lambda: npt_ridge(xtr, ytr, xte, args.chunk, **params)  # noqa: E731
    for name, func in (("floor", floor), ("npt", ours)):
        pred, entry = _route(cp, func)
        if pred is not None:
            entry["accuracy"] = float(np.mean(pred == yte))
        report[name] = entry
    _compare(report["floor"], report["npt"])
    return report


def job_kpca(cp: Any, args: argparse.Namespace, n: int, streamed: bool,
             rates: dict[str, float]) -> dict[str, Any]:  # fmt: skip
    x = _deformed(n, args.store)[0] if streamed else _mnist(n)[0]
    r = min(args.r, n // 4)
    report: dict[str, Any] = {"n": n, "r": r, "gamma": GAMMA}
    if streamed:
        floor = lambda: floor_kpca_streamed(cp, x, r, GAMMA, args.passes, args.block)  # noqa: E731
    else:
        floor = lambda: floor_kpca_dense(cp, x, r, GAMMA)  # noqa: E731
    found, report["floor"] = _route(cp, floor)
    if found is not None:
        report["floor"]["top10_residual"] = found[1]
        if streamed:
            report["floor"]["passes"] = args.passes + 1
            report["floor"]["pass_share_of_gemm"] = _pass_rate(
                n, x.shape[1], r + 20, report["floor"]["seconds"], args.passes + 1,
                rates["float32"],
            )  # fmt: skip
    precision = "float32" if streamed else "float64"
    ours, report["npt"] = _route(cp, lambda: npt_kpca(x, r, args.chunk, precision))
    if ours is not None:  # both sides' accuracy, by the same measure
        report["npt"]["top10_residual"] = ours[1]
    if ours is not None and found is not None:
        lam = found[0][: len(ours[0])]
        report["npt"]["eigenvalue_rel_diff_max"] = float(np.max(np.abs(ours[0] - lam) / lam[0]))
    _compare(report["floor"], report["npt"])
    return report


def job_pass(cp: Any, args: argparse.Namespace, n: int, rates: dict[str, float]) -> dict:
    x = _deformed(n, args.store)[0] if n > 60_000 else _mnist(n)[0]
    v = np.random.default_rng(0).standard_normal((n, args.width)).astype(np.float32)
    report: dict[str, Any] = {"n": n, "width": args.width, "d": x.shape[1]}
    # the same work timed on both sides: host rows and V in, K V back on the host, after
    # a warm-up of each
    _streamed_kv(cp, cp.asarray(x[: args.block]), cp.asarray(v[: args.block]), GAMMA, args.block)
    with contextlib.suppress(Exception):  # a route that fails says so in its timed run
        npt_pass(x[: args.chunk], v[: args.chunk], args.chunk)

    def floor() -> np.ndarray:
        return cp.asnumpy(_streamed_kv(cp, cp.asarray(x), cp.asarray(v), GAMMA, args.block))

    floor_out, report["floor"] = _route(cp, floor)
    ours, report["npt"] = _route(cp, lambda: npt_pass(x, v, args.chunk))
    for name in ("floor", "npt"):
        if "seconds" in report[name]:
            report[name]["share_of_gemm_float32"] = _pass_rate(
                n, x.shape[1], args.width, report[name]["seconds"], 1, rates["float32"]
            )
    if ours is not None and floor_out is not None:
        ref = np.asarray(floor_out)
        report["npt"]["rel_diff_max"] = float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))
    _compare(report["floor"], report["npt"])
    return report


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated, of {JOBS}")
    parser.add_argument("--n", type=int, help="rows of every job picked (default: each job's)")
    parser.add_argument("--quick", action="store_true", help="a tiny smoke run of each job")
    parser.add_argument("--store", help="deformed rows from make_mnist1m.py (default: generate)")
    parser.add_argument("--m", type=int, default=50_000, help="Nystrom landmarks")
    parser.add_argument("--nystrom-alpha", type=float, default=1e-3, help="Nystrom ridge alpha")
    parser.add_argument("--r", type=int, default=100, help="kernel PCA components")
    parser.add_argument("--passes", type=int, default=9, help="subspace iterations (streamed)")
    parser.add_argument("--width", type=int, default=128, help="columns of V in the pass job")
    parser.add_argument("--block", type=int, default=8192, help="rows a block of the floors")
    parser.add_argument("--chunk", type=int, default=8192, help="rows a chunk of npt's routes")
    return parser


def main() -> None:
    args = _parser().parse_args()
    jobs = [j.strip() for j in args.jobs.split(",") if j.strip()]
    unknown = sorted(set(jobs) - set(JOBS))
    if unknown:
        raise SystemExit(f"benchmarks/gpu.py: unknown jobs {unknown}; pick from {JOBS}.")
    cp = _cupy()
    if args.quick:
        args.m, args.r, args.passes = min(args.m, 500), min(args.r, 10), min(args.passes, 3)
        args.block = args.chunk = min(args.block, 1024)
    size = 1024 if args.quick else 8192
    rates = {dtype: device_gemm_rate(cp, dtype, size) for dtype in ("float32", "float64")}
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"]
    report: dict[str, Any] = {
        "device": name.decode() if isinstance(name, bytes) else str(name),
        "gemm_gflops": {k: round(v, 1) for k, v in rates.items()},
        "quick": args.quick,
        "jobs": {},
    }
    for job in jobs:
        n = args.n or (QUICK if args.quick else FULL)[job]
        if job in ("exact_ridge", "nystrom_ridge"):
            result = job_ridge(cp, args, n, nystrom=job == "nystrom_ridge")
        elif job in ("kpca60k", "kpca250k"):
            result = job_kpca(cp, args, n, streamed=job == "kpca250k", rates=rates)
        else:
            result = job_pass(cp, args, n, rates)
        report["jobs"][job] = result
        print(json.dumps({job: result}), file=sys.stderr)  # each as it finishes
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
