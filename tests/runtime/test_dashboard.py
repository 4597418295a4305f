"""Where the dashboard is: ``npt.connect()`` and ``npt run`` print its link; the
embedded cluster's port is random, so the line is the way to find it."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest
from distributed import LocalCluster

import npt_dask as npt
from npt_dask.interface.cli import main
from npt_dask.runtime.cluster import bokeh_requirement

LINK = re.compile(r"^npt: dask dashboard at (http://\S+/status) ", re.MULTILINE)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address="127.0.0.1:0"
    ) as c:
        yield c


def test_connect_prints_the_dashboard_link(cluster, capsys):
    with npt.connect(cluster.scheduler_address) as client:
        err = capsys.readouterr().err
        found = LINK.search(err)
        assert found is not None, err
        assert found.group(1) == client.dashboard_link
    with npt.connect(cluster.scheduler_address, show_dashboard=False):
        assert capsys.readouterr().err == ""


def test_embedded_cluster_link_says_what_its_pages_need(tmp_path, capsys):
    with npt.connect(n_workers=1, threads_per_worker=1, local_directory=tmp_path) as client:
        line = LINK.search(capsys.readouterr().err)
        assert line is not None
        assert line.group(1) == client.dashboard_link
        assert re.match(r"http://127\.0\.0\.1:\d+/status", line.group(1))
    try:
        import bokeh  # noqa: F401
    except ImportError:
        assert "pip install 'npt-dask[dashboard]'" in line.string


def test_without_bokeh_the_line_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "bokeh" else real(name, *a)
    )
    with npt.connect(n_workers=1, threads_per_worker=1, local_directory=tmp_path):
        err = capsys.readouterr().err
    assert "its pages need bokeh, not installed: pip install 'npt-dask[dashboard]'" in err
    assert "(or 'bokeh>=3.1" in err


def test_the_dashboard_extra_installs_the_bokeh_distributed_asks_for():
    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())["project"]
    (extra,) = (Requirement(r) for r in project["optional-dependencies"]["dashboard"])
    wanted = Requirement(bokeh_requirement())
    assert extra.name == wanted.name == "bokeh"
    from packaging.version import Version

    def bounds(spec):
        return {(s.operator, Version(s.version)) for s in spec}

    assert bounds(extra.specifier) == bounds(wanted.specifier)
    assert wanted.specifier.contains("3.1.0")
    assert extra.specifier.contains("3.1.0")


def test_npt_run_prints_the_dashboard_link(cluster, tmp_path, capsys):
    config = tmp_path / "kpca.toml"
    config.write_text(
        'name = "kpca-only"\n[data]\nsource = "moons"\nn_samples = 80\n'
        '[model]\nkernel = "rbf"\ngamma = 2.0\nn_components = 4\n'
        '[[methods]]\nname = "kpca"\n'
        f'[cluster]\naddress = "{cluster.scheduler_address}"\n'
        f'[output]\ndir = "{tmp_path / "out"}"\nplots = false\n'
    )
    assert main(["run", str(config)]) == 0
    err = capsys.readouterr().err
    assert LINK.search(err) is not None, err
    assert main(["run", str(config), "--quiet"]) == 0
    assert LINK.search(capsys.readouterr().err) is None  # --quiet: nothing on stderr
