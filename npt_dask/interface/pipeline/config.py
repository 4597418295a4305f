"""Pipeline configuration: a small declarative TOML file, read into frozen dataclasses.

A config names the data, the NPT model, the downstream methods, the cluster
and the output folder (a config whose stages all read the rows themselves --
``kernel_ridge`` -- needs no ``[model]``)::

    name = "quickstart"
    [data]
    source = "digits"          # "digits" (bundled with scikit-learn), "npz", "zarr" or "moons"
    test_fraction = 0.3
    [model]
    kernel = "rbf"
    gamma = "scale"            # a number, "scale" (1 / (d var X)) or omitted (1 / d)
    n_components = 300
    [[methods]]
    name = "ksvm"
    [cluster]
    n_workers = 2              # or: address = "tls://scheduler:8786" / scheduler_file = "..."
    [output]
    dir = "results/quickstart"

A top-level ``device = "gpu"`` moves the rows' chunks to the CUDA device (CuPy,
``pip install 'npt-dask[gpu]'``) before the fit, the grow stage and the projections (the
methods read the projections' zarr stores; ``kernel_ridge`` and
``kernel_svm_reference`` fit on the rows in host memory); a run on a machine without
CuPy or a GPU stops before anything is written.

Every section is validated before anything runs: unknown keys and bad values
raise :class:`~npt_dask.errors.InputError` naming the key and the allowed
values. ``to_dict``/``from_dict`` round-trip; nothing here reads data.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npt_dask.arrays.device import DEVICE_PARAM
from npt_dask.errors import InputError
from npt_dask.interface.pipeline.grow import GrowConfig
from npt_dask.interface.pipeline.outputs import check_free
from npt_dask.npt.params import FitParams, names

__all__ = [
    "ClusterConfig",
    "DataConfig",
    "MethodConfig",
    "ModelConfig",
    "OutputConfig",
    "PipelineConfig",
    "check_keys",
    "load_config",
    "model_config",
]

CONFIG_VERSION = 1
SOURCES = ("digits", "npz", "zarr", "moons")
METHODS = (
    "ksvm", "kfd", "kpcal1", "kpca", "alignment", "kernel_svm_reference", "ridge",
    "kernel_ridge",
)  # fmt: skip

LABEL_STAGES = frozenset(
    {"ksvm", "kfd", "alignment", "kernel_svm_reference", "ridge", "kernel_ridge"}
)
"""Stages that need class labels (a zarr source without them runs only the others)."""

TEST_STAGES = frozenset({"ksvm", "kfd", "kernel_svm_reference", "ridge", "kernel_ridge"})
"""Stages that score test rows (a zarr source without ``test`` runs only the others)."""

DATA_STAGES = frozenset({"kernel_ridge"})
"""Stages that read the rows themselves, not an NPT model: a config whose stages are all
of these needs no ``[model]`` table (nothing is fitted, saved or projected then)."""


def check_keys(given: Iterable[str], allowed: Iterable[str], where: str) -> None:
    """Refuse keys outside ``allowed``, suggesting the nearest for a typo.

    >>> check_keys(["n_component"], ["n_components", "gamma"], "in [model]")
    Traceback (most recent call last):
    ...
    npt_dask.errors.InputError: Unknown key 'n_component' (did you mean 'n_components'?) ...
    """
    names = sorted(allowed)
    unknown = sorted(set(given) - set(names))
    if not unknown:
        return
    hints = []
    for key in unknown:
        close = difflib.get_close_matches(key, names, n=1, cutoff=0.75)
        hints.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    plural = "s" if len(unknown) > 1 else ""
    raise InputError(f"Unknown key{plural} {', '.join(hints)} {where}; allowed: {names}.")


def _build(cls: type, section: str, values: Mapping[str, Any]) -> Any:
    if not isinstance(values, Mapping):
        raise InputError(f"[{section}] must be a table; got {type(values).__name__}.")
    check_keys(values, (f.name for f in dataclasses.fields(cls)), f"in [{section}]")
    return cls(**values)


@dataclass(frozen=True)
class DataConfig:
    """Where the rows come from and how they are split and scaled.

    ``source="npz"`` reads ``path`` (absolute, or relative to ``data_dir`` /
    ``$NPT_DATA_DIR``) with arrays ``x`` and ``y``; ``train``/``test`` are
    ``[start, stop)`` row ranges; ``classes`` keeps only those labels and
    ``per_class`` the first that many rows of each. ``scale`` divides ``x``;
    ``shift`` is subtracted afterwards (``scale = 127.5, shift = 1`` maps
    pixels to [-1, 1]).

    ``source="zarr"`` reads a zarr dataset lazily, chunk by chunk (``path`` is
    relative to the working directory): the rows are its variable ``x_var``
    (default ``"x"``, dims (sample, feature)), the labels its variable ``y_var``
    (default ``"y"``, dims (sample,)). Labels are optional: a store without
    ``y_var`` runs the stages that need none (``kpca``, ``kpcal1``); asking for
    a stage of :data:`LABEL_STAGES` then stops before any work, naming the
    store's variables. ``train`` defaults to all its rows; ``test`` are rows
    of ``test_path`` (an ``.npz`` read whole, looked up like ``path`` of an
    npz, divided by ``test_scale``) if given, else of the store; it is
    required only by the stages of :data:`TEST_STAGES` (scores on test rows).
    ``generate = {name = "deformed_mnist", ...}`` (keyword arguments of
    :func:`npt_dask.storage.datasets.write_deformed_mnist`; its ``source`` is looked
    up like ``test_path``) writes the store first when it is absent; a
    present store must have been generated with the same parameters::

        [data]
        source = "zarr"
        path = "embeddings.zarr"     # variables "pixels" (sample, feature), "digit" (sample)
        x_var = "pixels"
        y_var = "digit"              # omit for a store without labels (kpca only)
        train = [0, 50000]
        test = [50000, 60000]        # omit when no stage scores test rows
    """

    source: str = "digits"
    path: str | None = None
    data_dir: str | None = None
    train: tuple[int, int] | None = None
    test: tuple[int, int] | None = None
    test_fraction: float = 0.3
    classes: tuple[int, ...] | None = None
    per_class: int | None = None
    per_class_test: int | None = None
    scale: float | None = None
    shift: float = 0.0
    n_samples: int = 2000
    noise: float = 0.2
    seed: int = 0
    test_path: str | None = None
    test_scale: float | None = None
    generate: Mapping[str, Any] | None = None
    x_var: str | None = None
    y_var: str | None = None

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise InputError(f"[data] source must be one of {SOURCES}; got {self.source!r}.")
        if self.source == "npz" and not self.path:
            raise InputError("[data] source='npz' needs path = '<file>.npz'.")
        if self.source == "npz" and str(self.path).rstrip("/").endswith(".zarr"):
            raise InputError(
                f"[data] path = {self.path!r} is a zarr store, and source = 'npz' reads .npz "
                "files: set source = 'zarr' (its variables: x_var, default 'x', and y_var, "
                "default 'y')."
            )
        self._check_zarr()
        if not 0.0 < self.test_fraction < 1.0:
            raise InputError(f"[data] test_fraction must be in (0, 1); got {self.test_fraction}.")
        for name in ("train", "test"):
            rows = getattr(self, name)
            if rows is not None:
                if len(rows) != 2 or not 0 <= rows[0] < rows[1]:
                    raise InputError(f"[data] {name} must be [start, stop) with start < stop.")
                object.__setattr__(self, name, (int(rows[0]), int(rows[1])))
        if self.classes is not None:
            object.__setattr__(self, "classes", tuple(int(c) for c in self.classes))

    def _check_zarr(self) -> None:
        zarr_only = ("test_path", "test_scale", "generate", "x_var", "y_var")
        if self.source != "zarr":
            given = [k for k in zarr_only if getattr(self, k) is not None]
            if given:
                raise InputError(f"[data] {given} apply to source='zarr' only; remove them.")
            return
        if not self.path:
            raise InputError("[data] source='zarr' needs path = '<store>.zarr'.")
        for name in ("x_var", "y_var"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise InputError(f"[data] {name} must name a variable of the store; got {value!r}.")
        renamed = {k: v for k in ("x_var", "y_var") if (v := getattr(self, k)) not in (None, k[0])}
        if self.generate is not None and renamed:
            raise InputError(
                f"[data] generate writes variables 'x' and 'y'; remove {sorted(renamed)}."
            )
        if self.test_path is not None and self.test is None:
            raise InputError(
                "[data] test_path needs test = [start, stop): the rows of it to test on."
            )
        if self.test_scale is not None and self.test_path is None:
            raise InputError("[data] test_scale scales the rows of test_path; give test_path.")
        subsets = [k for k in ("classes", "per_class", "per_class_test") if getattr(self, k)]
        if subsets:
            raise InputError(
                f"[data] source='zarr' reads contiguous row ranges; remove {subsets} "
                "and select rows with train/test."
            )
        if self.generate is not None:
            from npt_dask.storage.datasets import generator_params

            generator_params(self.generate)  # refuses unknown keys and bad values now
            object.__setattr__(self, "generate", dict(self.generate))


ModelConfig = FitParams
"""The ``[model]`` table: the arguments of :func:`npt_dask.fit`, validated by its
one parameter table (:mod:`npt_dask.npt.params`); every fit option can be set here."""

MODEL_DEFAULTS: Mapping[str, Any] = {"n_components": 100, "random_state": 0}
"""Where a pipeline's ``[model]`` departs from ``npt.fit``'s defaults: a bounded
rank (a pipeline is for large n) and a fixed seed (re-runs reuse the model)."""


def model_config(values: Mapping[str, Any]) -> FitParams:
    """The ``[model]`` table as :class:`~npt_dask.npt.params.FitParams`."""
    if not isinstance(values, Mapping):
        raise InputError(f"[model] must be a table; got {type(values).__name__}.")
    check_keys(values, names(), "in [model]")
    if "device" in values:  # one place: the projection and the methods read it too
        raise InputError(
            "device belongs at the config's top level (device = 'gpu'), where the fit, the "
            "projection and the methods read it; remove it from [model].",
            param="device",
        )
    try:
        return FitParams.from_mapping({**MODEL_DEFAULTS, **values}, section="model")
    except (ValueError, TypeError) as exc:  # the table's wording, placed in the config
        raise type(exc)(f"In the config's [model] table: {exc}") from None


@dataclass(frozen=True)
class MethodConfig:
    """One downstream method and its parameters (passed to the method unchanged)."""

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)
    label: str | None = None

    @property
    def key(self) -> str:
        """The method's name in the report (``label``, else ``name``)."""
        return self.label or self.name

    def __post_init__(self) -> None:
        if self.name not in METHODS:
            raise InputError(f"[[methods]] name must be one of {METHODS}; got {self.name!r}.")
        object.__setattr__(self, "params", dict(self.params))

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> MethodConfig:
        """``{"name": ..., **params}`` as written in a ``[[methods]]`` table."""
        values = dict(values)
        if "name" not in values:
            raise InputError("Each [[methods]] table needs name = 'ksvm' | 'kfd' | ....")
        name, label = values.pop("name"), values.pop("label", None)
        return cls(name=name, params=values, label=label)

    def to_dict(self) -> dict[str, Any]:
        """The ``[[methods]]`` table."""
        return {"name": self.name, **({"label": self.label} if self.label else {}), **self.params}


@dataclass(frozen=True)
class ClusterConfig:
    """Where to run: an embedded LocalCluster (default) or an existing scheduler."""

    address: str | None = None
    scheduler_file: str | None = None
    n_workers: int | None = None
    threads_per_worker: int | None = 1
    memory_limit: str | int | None = None
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None


@dataclass(frozen=True)
class OutputConfig:
    """Results folder; ``overwrite`` restarts projections instead of resuming them."""

    dir: str = "results"
    overwrite: bool = False
    plots: bool = True


@dataclass(frozen=True)
class PipelineConfig:
    """A whole job: data -> fit -> persist -> project -> methods -> report."""

    name: str
    data: DataConfig = field(default_factory=DataConfig)
    model: FitParams | None = field(default_factory=lambda: model_config({}))
    methods: tuple[MethodConfig, ...] = ()
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    grow: GrowConfig | None = None  # the [grow] stage (npt_dask.interface.pipeline.grow)
    version: int = CONFIG_VERSION
    device: str | None = None  # "gpu": the rows' chunks on the CUDA device (fit, projection)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> PipelineConfig:
        """Validate a parsed TOML document (the caller's mapping is not modified)."""
        allowed = {"name", "version", "data", "model", "methods", "cluster", "output", "grow",
                   "device"}  # fmt: skip
        check_keys(values, allowed, "at the top level")
        if "name" not in values:
            raise InputError("The config needs a top-level name = '...'.")
        version = values.get("version", CONFIG_VERSION)
        if version != CONFIG_VERSION:
            raise InputError(
                f"Config version {version} is not supported (this is {CONFIG_VERSION})."
            )
        methods = tuple(MethodConfig.from_dict(m) for m in values.get("methods", []))
        keys = [m.key for m in methods]
        if len(set(keys)) != len(keys):
            raise InputError(
                f"[[methods]] names repeat ({keys}); give each repeat its own label = '...'."
            )
        data = _build(DataConfig, "data", values.get("data", {}))
        scored = sorted({m.name for m in methods} & TEST_STAGES)
        if data.source == "zarr" and data.test is None and scored:
            raise InputError(
                f"[[methods]] {scored} score test rows, and [data] gives none: add test = "
                "[start, stop) (rows of the store, or of test_path), or drop those stages."
            )
        needs_model = not methods or any(m.name not in DATA_STAGES for m in methods)
        if "model" not in values and not needs_model:
            model: FitParams | None = None  # only data stages: no NPT model
        else:
            model = model_config(values.get("model", {}))
        if "grow" in values and model is None:
            raise InputError("[grow] grows the NPT model: add a [model] table.")
        output = _build(OutputConfig, "output", values.get("output", {}))
        grow = _build(GrowConfig, "grow", values["grow"]) if "grow" in values else None
        _check_outputs_apart(data, grow, output)
        return cls(
            name=str(values["name"]),
            data=data,
            model=model,
            methods=methods,
            cluster=_build(ClusterConfig, "cluster", values.get("cluster", {})),
            output=output,
            grow=grow,
            device=_device(values.get("device")),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain data (TOML/JSON-ready, ``None`` values dropped)."""

        def plain(obj: Any) -> dict[str, Any]:
            items = dataclasses.asdict(obj).items()
            return {k: list(v) if isinstance(v, tuple) else v for k, v in items if v is not None}

        return {
            "name": self.name,
            "version": self.version,
            **({"device": self.device} if self.device is not None else {}),
            "data": plain(self.data),
            **({"model": plain(self.model)} if self.model is not None else {}),
            "methods": [m.to_dict() for m in self.methods],
            "cluster": plain(self.cluster),
            "output": plain(self.output),
        } | ({"grow": plain(self.grow)} if self.grow is not None else {})

    def with_overrides(self, **sections: Mapping[str, Any]) -> PipelineConfig:
        """A copy with some keys of some sections replaced (e.g. from the command line)."""
        current = self.to_dict()
        for section, values in sections.items():
            current[section] = {**current.get(section, {}), **values}
        return PipelineConfig.from_dict(current)


def _device(value: Any) -> str | None:
    """The top-level ``device`` key, checked by its table entry (the GPU's presence is
    checked when the pipeline runs, before anything is written)."""
    try:
        return DEVICE_PARAM.check(value)
    except (ValueError, TypeError) as exc:
        raise InputError(f"In the config's top level: {exc}", param="device") from None


def _check_outputs_apart(data: DataConfig, grow: GrowConfig | None, output: OutputConfig) -> None:
    """Refuse a ``[grow] out`` or a zarr ``[data] path`` that is one of the stores the run
    writes in its output folder (its model, projections, staged rows, report, figures,
    checkpoints): before any stage runs, not after one replaced the other."""
    if grow is not None:
        check_free(f"[grow] out = {grow.out!r}", Path(output.dir) / grow.out, output.dir)
    if data.source == "zarr" and data.path:
        check_free(f"[data] path = {data.path!r}", data.path, output.dir)


def load_config(path: str | Path) -> PipelineConfig:
    """Read and validate a TOML pipeline config.

    A relative ``[data] path`` stays relative (resolved against ``data_dir``
    or ``$NPT_DATA_DIR`` when the data are read); a relative ``[output] dir``
    is relative to the working directory.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InputError(f"Cannot read config {path}: {exc.strerror}.") from exc
    try:
        values = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path} is not valid TOML: {exc}.") from exc
    return PipelineConfig.from_dict(values)
