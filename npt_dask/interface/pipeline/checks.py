"""Everything a pipeline config refers to, checked before its first stage: a run never
stops after a fit and its projections for a file that was missing from the start.

* ``[output] dir``: a folder (created if absent; not a file, not a zarr store, not inside
  one) where files can be created (:func:`npt_dask.runtime.places.check_output_place`);
  ``[grow] out`` inside it, no store of the run's own, nor a model kept without
  ``overwrite`` (:func:`~npt_dask.interface.pipeline.grow.check_grow_target`);
* ``[data]``: the ``.npz`` file of ``source = "npz"`` and the ``test_path`` of a zarr
  source found (``data_dir``, ``$NPT_DATA_DIR``), a zarr store at ``path`` unless
  ``generate`` writes it (then its ``source`` found);
* ``[grow]``: the model a stored, growable NPT model (full rank, its rows stored), its
  parameters valid (growth's table; ``max_landmarks`` not below the model's rows), every
  file found, holding rows as wide as the model's (read from the files' headers).

Each refusal is an :class:`~npt_dask.errors.InputError` naming the config's key.
"""

from __future__ import annotations

from pathlib import Path

from npt_dask.errors import InputError, StoreError
from npt_dask.interface.pipeline.config import PipelineConfig
from npt_dask.interface.pipeline.data import located
from npt_dask.interface.pipeline.grow import GrowConfig, check_grow_target, resolve
from npt_dask.npt.growth import GROW_PARAMS, check_cap, check_growable
from npt_dask.npt.model import load
from npt_dask.params.constraints import check_table
from npt_dask.runtime.places import check_output_place
from npt_dask.storage.datasets import array_shape, generator_params

__all__ = ["check_references"]


def check_references(config: PipelineConfig) -> None:
    """Refuse, before the first stage, a config whose files or values cannot be used
    (see the module notes)."""

    out = config.output
    check_output_place(out.dir, f"[output] dir = {out.dir!r}", folder=True)
    if config.grow is not None:  # where the grown model goes, then what it grows from
        check_grow_target(config.grow, Path(out.dir), out.overwrite)
    _check_data(config)
    if config.grow is not None:
        check_grow_inputs(config.grow, config.data.data_dir)


def _found(key: str, name: str, data_dir: str | None) -> Path:
    try:
        path = located(name, data_dir)
    except InputError as exc:
        raise InputError(f"[data] {key} = {name!r}: {exc}", spellings=exc.spellings) from None
    if not path.is_file():
        raise InputError(f"[data] {key} = {name!r}: {path} does not exist; check the path.")
    return path


def _check_data(config: PipelineConfig) -> None:
    data = config.data
    if data.source == "npz" and data.path:
        _found("path", data.path, data.data_dir)
    if data.source != "zarr" or not data.path:
        return
    if data.test_path is not None:
        _found("test_path", data.test_path, data.data_dir)
    if data.generate is not None:
        source = str(generator_params(data.generate)["source"])
        _found("generate.source", source, data.data_dir)
    elif not Path(data.path).exists():
        raise InputError(
            f"[data] path = {data.path!r} does not exist; write the store first, or add a "
            "[data] generate table to write it."
        )


def check_grow_inputs(cfg: GrowConfig, data_dir: str | None) -> None:
    """The ``[grow]`` stage can run: its model, parameters and files (module notes)."""

    where = f"[grow] model = {cfg.model!r}"
    given = {"residual_tol": cfg.residual_tol, "max_landmarks": cfg.max_landmarks}
    try:
        check_table(GROW_PARAMS, given)
        model = load(cfg.model)
        check_growable(model)
    except (InputError, StoreError) as exc:
        raise InputError(f"{where}: {exc}") from None
    try:
        check_cap(cfg.max_landmarks, model.n_samples)  # growth's own rule, before the fit
    except InputError as exc:
        raise InputError(f"[grow] {exc}") from None
    for name in cfg.files:
        try:
            shape = array_shape(resolve(name, data_dir))
        except InputError as exc:
            raise InputError(f"[grow] files: {name!r}: {exc}", spellings=exc.spellings) from None
        if len(shape) != 2 or shape[1] != model.n_features:
            raise InputError(
                f"[grow] files: {name!r} holds an array of shape {shape}, and {where} has "
                f"rows of {model.n_features} columns: each file must hold rows (n, "
                f"{model.n_features}) like the model's."
            )
