"""One parameter table: every fit entry point accepts and refuses the same values alike.

The entry points are :func:`npt.fit`, :class:`NonlinearProjection`, ``npt fit``
on the command line and a pipeline's ``[model]`` table. Each bad value must
give the same message everywhere (the CLI prints it after ``error:``), and
every default must be the table's.
"""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path

import numpy as np
import pytest

import npt_dask as npt
from npt_dask.errors import NPTError
from npt_dask.interface import cli
from npt_dask.interface.cli.program import build_parser
from npt_dask.interface.pipeline.config import MODEL_DEFAULTS, PipelineConfig
from npt_dask.npt.params import ESTIMATOR_PARAMS, PARAMS, FitParams, fit_defaults

X = np.random.default_rng(0).normal(size=(40, 3))
ESTIMATOR = set(inspect.signature(npt.NonlinearProjection).parameters)

BAD = [(p.name, v) for p in PARAMS for v in p.invalid_values()]  # from the table
GOOD = [
    ("gamma", 0.5),
    ("gamma", "scale"),
    ("gamma", None),
    ("degree", 2.0),
    ("coef0", -1.0),
    ("kernel", "laplacian"),
    ("kernel", "poly"),
    ("n_components", 3),
    ("solver", "krylov"),
    ("tol", 1e-6),
    ("rtol", 0.0),
    ("chunk_size", 7),
    ("cache", "recompute"),
    ("memory_budget", 2**30),
    ("precision", "float32"),
    ("block_size", 4),
    ("max_basis", 30),
    ("max_passes", 60),
    ("on_negative", "raise"),
    ("random_state", 3),
    ("landmarks", 30),
    ("landmark_method", "rpcholesky"),
]


def _message(run) -> tuple[type, str]:
    with pytest.raises((ValueError, TypeError)) as info:
        run()
    return type(info.value), str(info.value)


def _kwargs(name, value):
    kw = {"n_components": 3, name: value}
    if name in ("block_size", "max_basis"):
        kw["solver"] = "krylov"
    return kw


def _cli_args(tmp_path: Path, name: str, value) -> list[str]:
    data = tmp_path / "x.npy"
    if not data.exists():
        np.save(data, X)
    kw = _kwargs(name, value)
    args = ["fit", str(data), "--out", str(tmp_path / "m.zarr"), "--quiet"]
    for key, v in kw.items():
        args += ["--" + key.replace("_", "-"), str(v)]
    return args


TOP_LEVEL = {"device"}
"""Fit parameters a pipeline reads at its config's top level (the fit, the projection and
the methods share them), not in ``[model]``."""


def _config(name, value) -> dict:
    model = _kwargs(name, value)
    top = {name: model.pop(name)} if name in TOP_LEVEL else {}
    return {
        "name": "t",
        **top,
        "data": {"source": "moons", "n_samples": 40},
        "model": model,
        "methods": [{"name": "kpca"}],
    }


def _on_the_command_line(name: str, value) -> bool:
    """Whether ``npt fit`` can be given ``value``: its flag's parser gives it back."""
    param = next(p for p in PARAMS if p.name == name)
    parse = param.parse
    if parse is None or param.default in (True, False):  # a switch takes no value
        return False
    try:
        back = parse(str(value))
    except NPTError:  # refused while parsing (a JSON flag): not the table's check
        return False
    return type(back) is type(value) and (back == value or value != value)


def test_the_generated_bad_values_cover_every_parameter_and_kind():
    assert {n for n, _ in BAD} == {p.name for p in PARAMS}
    assert ("n_components", 0) in BAD  # out of range
    assert ("n_components", 2.5) in BAD  # of the wrong type
    assert ("tol", 1.0) in BAD  # an open bound
    assert ("rtol", -1.0) in BAD  # below a closed one
    assert ("solver", "invalid") in BAD


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={v!r}" for n, v in BAD])
def test_every_entry_point_refuses_alike(name, value, tmp_path, capsys):
    kind, message = _message(lambda: npt.fit(X, **_kwargs(name, value)))
    assert issubclass(kind, NPTError)
    if name != "kernel":
        assert f"'{name}'" in message, message
    assert _message(lambda: FitParams(**_kwargs(name, value))) == (kind, message)
    config_kind, config_message = _message(lambda: PipelineConfig.from_dict(_config(name, value)))
    section = "top level" if name in TOP_LEVEL else "[model] table"
    assert (config_kind, config_message) == (kind, f"In the config's {section}: {message}")
    if name in ESTIMATOR:
        est = npt.NonlinearProjection(**_kwargs(name, value))
        assert _message(lambda: est.fit(X)) == (kind, message)
    if not _on_the_command_line(name, value):
        return
    if name == "device":  # the shared --device option: argparse's choices
        with pytest.raises(SystemExit) as stopped:
            cli.main(_cli_args(tmp_path, name, value))
        assert stopped.value.code == 2
        assert "--device: invalid choice: 'invalid'" in capsys.readouterr().err
        assert not (tmp_path / "m.zarr").exists()
        return
    assert cli.main(_cli_args(tmp_path, name, value)) == 2
    err = capsys.readouterr().err.strip()
    flag = "--" + name.replace("_", "-")
    words = message.replace(f"The '{name}' parameter", f"The {flag} option")
    assert err == f"npt fit: error: {words}", err
    assert f"'{name}' parameter" not in err  # the flag, not the Python name
    assert not (tmp_path / "m.zarr").exists()


@pytest.mark.parametrize(("name", "value"), GOOD, ids=[f"{n}={v!r}" for n, v in GOOD])
def test_every_entry_point_accepts_alike(name, value, tmp_path, capsys):
    model = npt.fit(X, **_kwargs(name, value))
    assert model.n_components == 3
    want = FitParams(**{**MODEL_DEFAULTS, **_kwargs(name, value)})
    assert want == PipelineConfig.from_dict(_config(name, value)).model
    if name in ESTIMATOR:
        assert npt.NonlinearProjection(**_kwargs(name, value)).fit(X).n_components_ == 3
    assert cli.main(_cli_args(tmp_path, name, value)) == 0, capsys.readouterr().err
    assert npt.load(tmp_path / "m.zarr").n_components == 3


def test_defaults_live_in_the_table():
    table = fit_defaults()
    assert table == {f: getattr(FitParams(), f) for f in table}
    fit_sig = inspect.signature(npt.fit).parameters
    for name, default in table.items():
        assert fit_sig[name].default == default, name
    est = npt.NonlinearProjection().get_params()
    # KernelPCA's estimator-only parameters (kernel_params, alpha, ...) keep their own Params
    extra = {p.name: p.default for p in ESTIMATOR_PARAMS}
    for name, value in est.items():
        assert {**extra, **table}[name] == value, name
    parser = build_parser()
    fit_parser = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    ).choices["fit"]
    defaults = {a.dest: a.default for a in fit_parser._actions}
    for param in PARAMS:
        if param.name in ("progress", "n_components", "start"):  # --quiet; required; a path
            continue
        if param.name == "kernel":  # absent unless given: the table's own default object
            assert defaults["kernel"] is argparse.SUPPRESS
            continue
        assert defaults[param.name] == param.default, param.name
    model = PipelineConfig.from_dict({"name": "t", "methods": [{"name": "kpca"}]}).model
    assert model == FitParams(**MODEL_DEFAULTS)  # the pipeline's departures, in one place


def test_gamma_scale_is_resolved_once_and_recorded():
    est = npt.NonlinearProjection(gamma="scale", n_components=3).fit(X)
    want = 1.0 / (X.shape[1] * X.var())
    assert est.gamma_ == pytest.approx(want, rel=1e-12)
    model = npt.fit(X, gamma="scale", n_components=3)
    assert model.kernel.gamma == pytest.approx(want, rel=1e-12)
    ref = npt.fit(X, gamma=want, n_components=3)
    np.testing.assert_allclose(model.eigenvalues, ref.eigenvalues, rtol=1e-10)
    constant = np.ones((10, 2))
    assert npt.make_kernel("rbf", gamma="scale").resolve(2, float(constant.var())).gamma == 1.0


def test_every_fit_option_is_reachable_from_cli_and_config():
    parser = build_parser()
    fit_parser = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    ).choices["fit"]
    dests = {a.dest for a in fit_parser._actions}
    assert {p.name for p in PARAMS} - {"progress"} <= dests  # progress: --quiet
    assert set(fit_defaults()) == {f for f in FitParams.__dataclass_fields__}


ESTIMATOR_BAD = [(p.name, v) for p in ESTIMATOR_PARAMS for v in p.invalid_values()]


@pytest.mark.parametrize(
    ("name", "value"), ESTIMATOR_BAD, ids=[f"{n}={v!r}" for n, v in ESTIMATOR_BAD]
)
def test_the_estimators_own_parameters_are_refused_by_the_table(name, value):
    kind, message = _message(
        lambda: npt.NonlinearProjection(n_components=3, **{name: value}).fit(X)
    )
    assert issubclass(kind, NPTError)
    assert f"The '{name}' parameter must be" in message, message
