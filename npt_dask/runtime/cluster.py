"""One way to obtain a dask ``Client``: an embedded ``LocalCluster`` (or, with ``gpu=True``,
dask-cuda's ``LocalCUDACluster``: one worker per GPU) or an existing cluster.

:func:`connect` returns a ``distributed.Client`` that is the current
scheduler for everything npt-dask computes. As a context manager it closes
what it created (the client, and the embedded cluster if it started one) and
leaves an existing cluster running. :class:`TLSConfig` holds the TLS
certificates for ``tls://`` schedulers.

This module only connects; it computes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import logging
import os
import sys
import tempfile
import types
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from distributed import WorkerPlugin

from npt_dask.arrays.device import GPU_INSTALL
from npt_dask.errors import ClusterError, DeviceError, InputError, InputTypeError, NPTError

__all__ = [
    "CupyFromRMMPool",
    "TLSConfig",
    "bokeh_requirement",
    "connect",
    "dashboard_line",
    "default_layout",
    "quiet_lost_scheduler",
    "spill_directory",
]

WORKERS_MEMORY_SHARE = 0.75
"""Share of the machine's memory all embedded workers together may use."""

_SCHEMES = ("tcp://", "tls://", "inproc://", "ws://", "wss://", "ucx://")


@dataclass(frozen=True)
class TLSConfig:
    """TLS certificates of a client (PEM files).

    Parameters
    ----------
    ca_file : str
        Certificate of the authority that signed the scheduler's and workers'
        certificates, and this client's.
    cert : str
        This client's certificate: dask uses mutual TLS, so a ``tls://``
        scheduler refuses clients without one. It may also hold the key.
    key : str, optional
        This client's private key, if not in ``cert``.

    Examples
    --------
    >>> from npt_dask.runtime.cluster import TLSConfig
    >>> tls = TLSConfig("ca.pem", cert="client.pem", key="client-key.pem")
    >>> TLSConfig.from_dict(tls.to_dict()) == tls
    True
    >>> tls.to_dict()
    {'ca_file': 'ca.pem', 'cert': 'client.pem', 'key': 'client-key.pem'}
    """

    ca_file: str
    cert: str
    key: str | None = None

    def __post_init__(self) -> None:
        for name in ("ca_file", "cert", "key"):
            value = getattr(self, name)
            if value is None and name == "key":
                continue
            if not isinstance(value, str | os.PathLike) or not os.fspath(value):
                raise InputTypeError(
                    f"TLSConfig.{name} must be a path to a PEM file; got {value!r}."
                )
            object.__setattr__(self, name, os.fspath(value))

    def to_dict(self) -> dict[str, str | None]:
        """Plain dict (JSON/YAML-serialisable)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TLSConfig:
        """Build from :meth:`to_dict` output; unknown keys are an error."""
        unknown = set(data) - {"ca_file", "cert", "key"}
        if unknown:
            raise InputError(f"Unknown TLS settings {sorted(unknown)}; use ca_file, cert, key.")
        missing = {"ca_file", "cert"} - set(data)
        if missing:
            raise InputError(
                f"TLS settings lack {sorted(missing)}: give the cluster's CA (ca_file) and "
                "this client's certificate (cert)."
            )
        return cls(**data)

    def security(self) -> Any:
        """A ``distributed.Security`` requiring encryption, after checking the files."""
        from distributed import Security

        for name in ("ca_file", "cert", "key"):
            path = getattr(self, name)
            if path is not None and not os.access(path, os.R_OK):
                raise InputError(f"TLS {name} {path!r} does not exist or is not readable.")
        return Security(
            tls_ca_file=self.ca_file,
            tls_client_cert=self.cert,
            tls_client_key=self.key,
            tls_scheduler_cert=self.cert,
            tls_scheduler_key=self.key,
            tls_worker_cert=self.cert,
            tls_worker_key=self.key,
            require_encryption=True,
        )


def default_layout(cores: int | None = None, memory: int | None = None) -> tuple[int, int, int]:
    """``(n_workers, threads_per_worker, memory_limit)`` of the embedded cluster.

    See :func:`connect` (Notes) for the rule.

    Examples
    --------
    >>> from npt_dask.runtime.cluster import default_layout
    >>> default_layout(cores=2, memory=16 * 2**30)
    (2, 1, 6442450944)
    >>> default_layout(cores=32, memory=256 * 2**30)[:2]
    (8, 4)
    """
    import dask.system
    import distributed.system
    from distributed.deploy.utils import nprocesses_nthreads

    cores = cores or dask.system.CPU_COUNT  # honours affinity and cgroup limits
    memory = memory or distributed.system.MEMORY_LIMIT  # honours cgroup limits
    n_workers, threads = nprocesses_nthreads(cores)  # LocalCluster's own layout
    per_worker = int(memory * WORKERS_MEMORY_SHARE) // n_workers
    return n_workers, threads, per_worker


def spill_directory() -> Path:
    """Where embedded workers spill: dask's ``temporary-directory``, else the
    system temporary directory, unless that is a RAM disk (tmpfs), then
    ``~/.cache/npt-dask``."""
    import dask

    configured = dask.config.get("temporary-directory", None)
    if configured:
        return Path(configured)
    tmp = Path(tempfile.gettempdir())
    return Path.home() / ".cache" / "npt-dask" if _on_tmpfs(tmp) else tmp


def _on_tmpfs(path: Path) -> bool:
    import psutil

    best, fstype = "", ""
    for part in psutil.disk_partitions(all=True):
        mount = part.mountpoint
        if str(path).startswith(mount) and len(mount) > len(best):
            best, fstype = mount, part.fstype
    return fstype in ("tmpfs", "ramfs")


def _check_address(address: Any, tls: TLSConfig | None) -> str:
    if not isinstance(address, str):
        raise InputTypeError(f"address must be a string like 'tcp://host:8786'; got {address!r}.")
    if "://" not in address:
        address = f"{'tls' if tls else 'tcp'}://{address}"
    if not address.startswith(_SCHEMES):
        raise InputError(
            f"Scheduler address {address!r} has an unknown protocol; use one of "
            f"{', '.join(s[:-3] for s in _SCHEMES)}."
        )
    if address.startswith("tls://") and tls is None:
        raise InputError(
            f"{address} is a TLS scheduler; pass tls=TLSConfig(ca_file, cert, key) "
            "(--tls-ca-file/--tls-cert/--tls-key on the command line)."
        )
    if tls is not None and not address.startswith(("tls://", "wss://")):
        raise InputError(f"TLS settings were given but {address} is not a tls:// address.")
    return address


def _check_embedded_only(address: str | None, scheduler_file: Any, **options: Any) -> None:
    if address is not None and scheduler_file is not None:
        raise InputError("Give either a scheduler address or a scheduler file, not both.")
    given = sorted(k for k, v in options.items() if v is not None)
    if (address is not None or scheduler_file is not None) and given:
        raise InputError(
            f"{', '.join(given)} configure the embedded LocalCluster and cannot be used "
            "with an existing scheduler; set them where the workers are started."
        )


def _scheduler_from_file(scheduler_file: Any) -> str:
    import json

    path = Path(scheduler_file)
    try:
        address = json.loads(path.read_text())["address"]
    except OSError as exc:
        raise ClusterError(
            f"Scheduler file {path} cannot be read ({exc.strerror}); check the path and that "
            "'dask scheduler --scheduler-file' has started."
        ) from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise ClusterError(
            f"Scheduler file {path} is not a dask scheduler file (no 'address')."
        ) from exc
    return address


def _client_for(address: str, tls: TLSConfig | None, timeout: float) -> Any:
    from distributed import Client

    security = None if tls is None else tls.security()
    try:
        return Client(address, security=security, timeout=timeout, set_as_default=True)
    except (OSError, TimeoutError) as exc:
        text = str(exc)
        if tls is not None and any(w in text for w in ("TLS", "SSL", "certificate")):
            raise ClusterError(
                f"The scheduler at {address} refused the TLS handshake ({text}). Check that "
                f"ca_file is the cluster's CA and that cert/key were signed by it."
            ) from exc
        raise ClusterError(
            f"No dask scheduler answered at {address} within {timeout:g}s ({text}). Check "
            "that the scheduler is running, the address and port, firewalls, and that the "
            "protocol matches (tcp:// or tls://)."
        ) from exc


def connect(
    address: str | None = None,
    *,
    scheduler_file: str | os.PathLike | None = None,
    tls: TLSConfig | Mapping[str, Any] | None = None,
    n_workers: int | None = None,
    threads_per_worker: int | None = None,
    memory_limit: int | str | None = None,
    local_directory: str | os.PathLike | None = None,
    timeout: float = 10.0,
    show_dashboard: bool = True,
    gpu: bool = False,
    rmm_pool_size: int | float | str | None = None,
    cuda_visible_devices: str | Sequence[int] | None = None,
) -> Any:
    """A ``distributed.Client``: an embedded LocalCluster, or an existing scheduler.

    Parameters
    ----------
    address : str, optional
        Scheduler address, ``tcp://host:8786`` or ``tls://host:8786`` (a bare
        ``host:port`` means tcp, or tls when ``tls`` is given).
    scheduler_file : path, optional
        JSON file written by ``dask scheduler --scheduler-file``.
    tls : TLSConfig or dict, optional
        Certificates for a ``tls://`` scheduler; required for one. (The
        embedded cluster takes none: it listens on 127.0.0.1 only.)
    n_workers, threads_per_worker, memory_limit, local_directory : optional
        Layout of the embedded cluster (see Notes); only without ``address``
        and ``scheduler_file``.
    timeout : float, default 10
        Seconds to wait for an existing scheduler to answer.
    show_dashboard : bool, default True
        Print the link of the cluster's dashboard (task stream, progress, worker
        memory) on stderr, one line: the embedded cluster's port is chosen at random.
    gpu : bool, default False
        Embed dask-cuda's ``LocalCUDACluster`` instead: one worker process per
        visible GPU (``n_workers`` defaults to their number), one thread each; needs
        ``pip install 'npt-dask[gpu]'`` (CUDA 13 drivers) or ``'npt-dask[gpu-cu12]'``.
        Only without ``address`` and ``scheduler_file``.
    rmm_pool_size : int, float or str, optional
        With ``gpu=True``: each worker's RMM memory pool on its GPU (``"60GB"``, bytes,
        or a share of the GPU's memory such as ``0.8``), allocated once at start-up, and
        CuPy's allocations on that worker are taken from it (no allocation per task).
    cuda_visible_devices : str or list of int, optional
        With ``gpu=True``: the GPUs to use (``"0,1"`` or ``[0, 1]``); default all.

    Returns
    -------
    distributed.Client
        The default scheduler from now on. ``with connect(...) as client:``
        closes the client, and the cluster only if it was embedded.

    Raises
    ------
    ClusterError
        The scheduler did not answer (a ValueError: the address is wrong or down).
    DeviceError
        ``gpu=True`` without dask-cuda (or ``rmm_pool_size`` without RMM or CuPy), or
        dask-cuda could not start on the GPUs (one line, naming the fix).
    InputError, InputTypeError
        Conflicting or malformed arguments.

    Notes
    -----
    The embedded cluster runs worker *processes* (no GIL contention, and a
    worker that exceeds its memory is restarted rather than the caller
    killed), all bound to 127.0.0.1 with the dashboard on 127.0.0.1:

    * workers: one per core up to 4 cores; beyond, about sqrt(cores)
      workers of cores / workers threads (dask's own rule);
    * memory limit per worker: 75% of the machine's memory (cgroup limits
      honoured) divided among the workers, leaving the client the fit's
      default ``memory_budget`` (a sixth) and headroom; past it workers
      spill to disk, then pause;
    * spill directory: ``local_directory``, else dask's
      ``temporary-directory``, else the system temporary directory unless it
      is a RAM disk (tmpfs), then ``~/.cache/npt-dask``.

    With ``gpu=True`` and ``rmm_pool_size``, dask-cuda makes each worker's RMM pool
    and :class:`CupyFromRMMPool` (a worker plugin, on every worker that joins) sets
    ``cupy.cuda.set_allocator(rmm_cupy_allocator)`` there: CuPy then allocates from
    the pool, which a fit's default ``device_memory_budget`` counts as free (it is
    read on the workers).

    Examples
    --------
    >>> from npt_dask.runtime.cluster import connect
    >>> with connect(n_workers=1, threads_per_worker=1) as client:  # doctest: +SKIP
    ...     model = npt.fit(X, n_components=10)
    >>> connect("tcp://10.0.0.5:8786")  # doctest: +SKIP
    >>> with connect(gpu=True, rmm_pool_size="60GB"):  # doctest: +SKIP
    ...     model = npt.fit(to_device(X, "gpu"), n_components=100)
    """
    if isinstance(tls, Mapping):
        tls = TLSConfig.from_dict(tls)
    if tls is not None and not isinstance(tls, TLSConfig):
        raise InputTypeError(f"tls must be a TLSConfig or a dict; got {type(tls).__name__}.")
    _check_embedded_only(
        address, scheduler_file, n_workers=n_workers, threads_per_worker=threads_per_worker,
        memory_limit=memory_limit, local_directory=local_directory,
        gpu=gpu or None, rmm_pool_size=rmm_pool_size, cuda_visible_devices=cuda_visible_devices,
    )  # fmt: skip
    if not gpu and (rmm_pool_size is not None or cuda_visible_devices is not None):
        raise InputError(
            "rmm_pool_size and cuda_visible_devices configure the GPU cluster; pass gpu=True."
        )
    if scheduler_file is not None:
        address = _scheduler_from_file(scheduler_file)
    if address is not None:
        client = _client_for(_check_address(address, tls), tls, timeout)
    elif tls is not None:
        raise InputError(
            "tls applies to an existing tls:// scheduler (give its address); the embedded "
            "LocalCluster listens on 127.0.0.1 only."
        )
    elif gpu:
        _check_main_guard()
        client = _embedded_cuda(
            n_workers, threads_per_worker, memory_limit, local_directory,
            rmm_pool_size=rmm_pool_size, cuda_visible_devices=cuda_visible_devices,
        )  # fmt: skip
    else:
        _check_main_guard()
        client = _embedded(n_workers, threads_per_worker, memory_limit, local_directory)
    if show_dashboard and (line := dashboard_line(client, embedded=address is None)):
        print(line, file=sys.stderr)
    return client


def dashboard_line(client: Any, *, embedded: bool) -> str | None:
    """The line :func:`connect` prints: where the cluster's dashboard is (None if it has
    none). The embedded cluster's pages need ``bokeh`` here; say so when it is missing."""
    import importlib.util

    link = getattr(client, "dashboard_link", None)
    if not link:
        return None
    line = f"npt: dask dashboard at {link} (tasks, progress and worker memory, live)"
    if embedded and importlib.util.find_spec("bokeh") is None:
        line += (
            f"; its pages need bokeh, not installed: pip install 'npt-dask[dashboard]' "
            f"(or '{bokeh_requirement()}')"
        )
    return line


def bokeh_requirement() -> str:
    """The bokeh that dask's dashboard asks for (``distributed``'s own requirement, so the
    hint follows it; ``bokeh>=3.1``, the ``dashboard`` extra's, where it says none)."""
    try:
        from distributed.versions import BOKEH_REQUIREMENT
    except ImportError:
        return "bokeh>=3.1"
    return str(BOKEH_REQUIREMENT)


_GUARD_HINT = """\
Put the code that starts the cluster under the guard, e.g.

    if __name__ == "__main__":
        with npt.connect() as client:
            ...

(see "Safe importing of main module" in Python's multiprocessing docs)."""


class _ConnectionNoise(logging.Filter):
    """Drops the records a client logs while it fails to reach a scheduler that is gone
    (a traceback each, then "Failed to reconnect"): the caller reports that in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, OSError | TimeoutError | asyncio.CancelledError):
            return False
        return "reconnect" not in record.getMessage().lower()


_CONNECTION_LOGGERS = ("distributed.client", "distributed.batched")
"""The loggers a lost scheduler fills with tracebacks: the client's reconnections, and
its batched stream's closed comm."""


@contextlib.contextmanager
def quiet_lost_scheduler() -> Iterator[None]:
    """Within the block, ``distributed``'s client does not log tracebacks of failed
    reconnections (a killed scheduler gives screens of them); the command line reports
    a lost scheduler in one line instead."""
    loggers = [logging.getLogger(name) for name in _CONNECTION_LOGGERS]
    noise = _ConnectionNoise()
    for logger in loggers:
        logger.addFilter(noise)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(noise)


def _check_main_guard() -> None:
    """Refuse to start an embedded cluster from a script's unguarded top level.

    The embedded workers are *spawned* processes, which import the main script
    again (as ``__mp_main__``): an unguarded ``npt.connect()`` there would start
    a cluster in every worker, and multiprocessing stops each with a bootstrapping
    ``RuntimeError``. Checked in the script's process before any worker exists
    (one clear error instead of a traceback per worker), and in a worker that
    imports the script all the same (then that worker stops with this error).
    """
    import multiprocessing

    # multiprocessing's own test (spawn._check_not_importing_main): a spawned child
    # is still unpickling its parent's state, which includes importing the script
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise ClusterError(
            "npt.connect() ran while a worker process was importing the main script: the "
            f"script starts the embedded cluster without an if __name__ == '__main__' guard. "
            f"{_GUARD_HINT}"
        )
    where = _unguarded_main_call()
    if where is not None:
        script, line = where
        raise ClusterError(
            f"npt.connect() is called at the top level of {script} (line {line}) without an "
            "if __name__ == '__main__' guard: the embedded cluster's worker processes import "
            f"{Path(script).name} again and would each start a cluster. {_GUARD_HINT}"
        )


def _unguarded_main_call() -> tuple[str, int] | None:
    """``(script, line)`` if the call stack runs through an unguarded top-level
    statement of a main script that spawned processes re-import; else None."""
    import ast
    import sys

    import dask

    if dask.config.get("distributed.worker.multiprocessing-method", "spawn") == "fork":
        return None
    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    name = getattr(getattr(main, "__spec__", None), "name", None) or ""
    if not script or not str(script).endswith(".py") or name.rpartition(".")[2] == "__main__":
        return None  # interactive, -c, or a package's __main__: spawn does not re-run it
    frame: types.FrameType | None = sys._getframe()
    line = None
    while frame is not None:
        if frame.f_code.co_name == "<module>" and frame.f_globals is vars(main):
            line = frame.f_lineno
        frame = frame.f_back
    if line is None:
        return None
    try:
        tree = ast.parse(Path(script).read_text(), filename=script)
    except (OSError, SyntaxError, ValueError):
        return None
    for stmt in tree.body:
        if stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
            guarded = isinstance(stmt, ast.If) and any(
                isinstance(n, ast.Name) and n.id == "__name__" for n in ast.walk(stmt.test)
            )
            return None if guarded else (str(script), line)
    return None


def _embedded(
    n_workers: int | None,
    threads: int | None,
    memory_limit: int | str | None,
    local_directory: Any,
) -> Any:
    from dask.system import CPU_COUNT
    from distributed import LocalCluster

    workers, per, limit = default_layout()
    if n_workers is None and threads is not None:  # as LocalCluster: fill the cores
        n_workers = max(1, CPU_COUNT // threads)
    if n_workers is not None and threads is None:
        per = max(1, CPU_COUNT // n_workers)
    n_workers = n_workers or workers
    if memory_limit is None:
        memory_limit = limit * workers // n_workers
    spill = Path(local_directory) if local_directory is not None else spill_directory()
    spill.mkdir(parents=True, exist_ok=True)
    cluster = LocalCluster(
        n_workers=n_workers,
        threads_per_worker=threads or per,
        memory_limit=memory_limit,
        local_directory=str(spill),
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    )
    return _owning_client(cluster)  # closing the client closes the cluster, quietly


def _embedded_cuda(
    n_workers: int | None,
    threads: int | None,
    memory_limit: int | str | None,
    local_directory: Any,
    *,
    rmm_pool_size: int | float | str | None,
    cuda_visible_devices: str | Sequence[int] | None,
) -> Any:
    """A client owning a dask-cuda ``LocalCUDACluster`` on 127.0.0.1: one worker per GPU
    (dask-cuda's rule), each with its GPU in ``CUDA_VISIBLE_DEVICES`` first, and with
    ``rmm_pool_size`` an RMM pool there that CuPy allocates from; closing the client
    closes the cluster. dask-cuda's errors are re-raised in one line naming the fix."""
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError:
        raise DeviceError(
            "connect(gpu=True) starts dask-cuda's LocalCUDACluster, and dask-cuda is not "
            f"installed here: {GPU_INSTALL}."
        ) from None
    if rmm_pool_size is not None:
        _check_rmm_pool(rmm_pool_size)
    spill = Path(local_directory) if local_directory is not None else spill_directory()
    spill.mkdir(parents=True, exist_ok=True)
    options: dict[str, Any] = {
        "CUDA_VISIBLE_DEVICES": cuda_visible_devices, "n_workers": n_workers,
        "threads_per_worker": threads or 1, "memory_limit": memory_limit or "auto",
        "local_directory": str(spill), "rmm_pool_size": rmm_pool_size,
        "host": "127.0.0.1", "dashboard_address": "127.0.0.1:0",
    }  # fmt: skip
    try:
        cluster = LocalCUDACluster(**options)
    except Exception as exc:  # no driver or device (NVML), a pool too large, n_workers
        raise _cuda_cluster_error(exc, n_workers) from exc
    client = _owning_client(cluster)
    if rmm_pool_size is not None:
        _hand_pool_to_cupy(client)
    return client


def _check_rmm_pool(size: Any) -> None:
    """Refuse, before any worker starts, a pool size dask-cuda cannot read, or a pool where
    RMM or CuPy is missing (dask-cuda's own message is a bare ``ValueError``)."""
    import dask.utils

    readable = isinstance(size, int | float) and not isinstance(size, bool) and size > 0
    if isinstance(size, float):
        readable = 0 < size <= 1
    if isinstance(size, str):
        with contextlib.suppress(ValueError, TypeError):
            readable = dask.utils.parse_bytes(size) > 0
    if not readable:
        raise InputError(
            f"rmm_pool_size={size!r} is not a pool size: give bytes, a size such as '60GB', "
            "or a share of each GPU's memory such as 0.8."
        )
    for module, package in (("rmm", "rmm-cu13 or rmm-cu12"), ("cupy", "CuPy")):
        try:
            importlib.import_module(module)
        except ImportError as exc:
            problem = f"{package} is not installed here"
            if importlib.util.find_spec(module) is not None:  # installed, but broken
                problem = f"{module} does not import ({type(exc).__name__}: {exc})"
            raise DeviceError(
                f"connect(gpu=True, rmm_pool_size={size!r}) gives each GPU worker an RMM pool "
                f"for CuPy, and {' '.join(problem.split())}: {GPU_INSTALL}; or leave "
                "rmm_pool_size=None (CuPy then keeps its own memory pool)."
            ) from None


def _cuda_cluster_error(exc: Exception, n_workers: int | None) -> NPTError:
    """dask-cuda's failure to start, as one line naming the likely fix."""
    lines = str(exc).strip().splitlines() or [""]
    said = f"{type(exc).__name__}: {lines[0][:300]}"
    if "scale beyond visible devices" in str(exc):
        return ClusterError(
            f"connect(gpu=True, n_workers={n_workers}) asks for more workers than there are "
            f"visible GPUs ({said}); leave n_workers=None (one worker per GPU) or name more "
            "GPUs with cuda_visible_devices."
        )
    return DeviceError(
        f"dask-cuda could not start a LocalCUDACluster ({said}). Check that a CUDA device "
        "is visible (nvidia-smi; CUDA_VISIBLE_DEVICES), that rmm_pool_size fits in each "
        "GPU's memory, and that dask-cuda matches the CUDA driver (gpu-cu13 or gpu-cu12); "
        "or use npt.connect() without gpu=True."
    )


class CupyFromRMMPool(WorkerPlugin):
    """Makes CuPy allocate from the worker's RMM pool: ``cupy.cuda.set_allocator(
    rmm.allocators.cupy.rmm_cupy_allocator)`` on each worker, those that join later too.

    dask-cuda makes the pool (``rmm_pool_size``) but leaves CuPy on its own allocator,
    which takes what the pool left of the GPU (a 60 GB pool on an 80 GB H100 leaves CuPy
    some 18 GB). dask-cuda's own ``rmm_allocator_external_lib_list=["cupy"]`` (24.12 on)
    would do the same inside dask-cuda; this plugin is the one mechanism here, so what
    sets the allocator is npt-dask's code, tested on any machine.
    """

    name = "npt-dask-cupy-from-rmm-pool"

    def setup(self, worker: Any = None) -> None:
        cupy = importlib.import_module("cupy")
        from rmm.allocators.cupy import rmm_cupy_allocator

        cupy.cuda.set_allocator(rmm_cupy_allocator)


def _hand_pool_to_cupy(client: Any) -> None:
    """Register :class:`CupyFromRMMPool` on ``client``'s workers, closing the client (and
    its cluster) with a one-line error if a worker cannot take it."""
    try:
        client.register_plugin(CupyFromRMMPool(), name=CupyFromRMMPool.name)
    except Exception as exc:
        client.close()
        lines = str(exc).strip().splitlines() or [""]
        raise ClusterError(
            "The GPU workers started with their RMM pools but could not hand them to CuPy "
            f"({type(exc).__name__}: {lines[0][:300]}). Check that rmm and CuPy import on "
            f"the workers ({GPU_INSTALL}), or leave rmm_pool_size=None."
        ) from exc


def _owning_client(cluster: Any) -> Any:
    """A default ``distributed.Client`` of ``cluster`` that closes it when it closes (as a
    client that started its LocalCluster itself does), in the order that keeps a correct
    run's end quiet (:func:`close_cluster`)."""
    from distributed import Client

    class OwningClient(Client):
        def close(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().close(*args, **kwargs)
            finally:
                close_cluster(cluster)

    try:
        return OwningClient(cluster, set_as_default=True)
    except BaseException:
        cluster.close()
        raise


CLOSE_SECONDS = 30.0
"""Seconds each worker process of an embedded cluster is given to stop when it closes.
distributed's own is 5 s, of which the process gets 4 before it is killed: on a busy
machine a worker's exit takes longer, and the kill prints "Worker process still alive
after 4.0 seconds, killing" and the broken connections' tracebacks after a correct run."""


def close_cluster(cluster: Any, seconds: float = CLOSE_SECONDS) -> None:
    """Close an embedded cluster after its client: first every worker (each given
    ``seconds`` to stop, while the scheduler that it says goodbye to is still up), then
    the scheduler. Nothing is raised: the run's own result or error is what matters."""

    async def stop_workers() -> None:
        workers = list(getattr(cluster, "workers", {}).values())
        await asyncio.gather(*(w.close(timeout=seconds) for w in workers), return_exceptions=True)

    with contextlib.suppress(Exception):
        cluster.sync(stop_workers)
    with contextlib.suppress(Exception):
        cluster.close(timeout=seconds)
