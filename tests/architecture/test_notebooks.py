"""Every notebook in ``notebooks/`` runs top to bottom and writes its figures.

The notebooks are jupytext percent-format ``.py`` files. Each is read with
jupytext and executed by nbclient in a ``python3`` kernel whose working
directory is ``notebooks/``; ``NPT_DATA_DIR`` and ``NPT_NOTEBOOK_OUT`` reach
the kernel through the environment. A notebook needing a data file is skipped
when the file is absent.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, data_dir

pytest.importorskip("matplotlib")
jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = REPO / "notebooks"

# notebook -> (data files it reads, PNG files it must write into NPT_NOTEBOOK_OUT)
EXPECTED = {
    "01_feature_space_of_a_kernel.py": (
        ["mnist.npz"],
        [
            "01_spectrum_k1.png",
            "01_spectrum_k2.png",
            "01_scatter_k1.png",
            "01_scatter_k2.png",
            "01_tsne.png",
            "01_kfd.png",
        ],
    ),
    "02_out_of_core_projection_on_a_cluster.py": (
        ["fashion_mnist_8class.npz"],
        [
            "02_spectrum.png",
            "02_scatter.png",
            "02_class_means.png",
            "02_residual_histogram.png",
            "02_novelty_roc.png",
        ],
    ),
    "03_beyond_the_kernel_trick.py": (
        ["mnist.npz"],
        ["03_kpcal1_scores.png", "03_kpcal1_sweep.png", "03_ksvm_decisions.png"],
    ),
    "04_denoising_digits.py": ([], ["04_denoising.png", "04_mse_vs_components.png"]),
    "05_growing_model.py": ([], ["05_certificate.png", "05_accuracy.png"]),
}

MIN_PNG_BYTES = 5_000  # a rendered plot with axes, points and text, not an empty canvas


def test_every_notebook_is_listed() -> None:
    found = sorted(p.name for p in NOTEBOOKS.glob("*.py"))
    assert found == sorted(EXPECTED), "add new notebooks to EXPECTED with their figures"


def _outputs(nb) -> list[dict]:
    return [output for cell in nb.cells for output in cell.get("outputs", [])]


def _errors(nb) -> list[str]:
    """Each error output as its traceback, without terminal colours."""
    return [
        re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(o.get("traceback") or [o["ename"], o["evalue"]]))
        for o in _outputs(nb)
        if o.get("output_type") == "error"
    ]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_runs(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    needs, figures = EXPECTED[name]
    data = data_dir()
    missing = [f for f in needs if not (data / f).is_file()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not in {data} (set NPT_DATA_DIR)")
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("NPT_DATA_DIR", str(data))
    monkeypatch.setenv("NPT_NOTEBOOK_OUT", str(out))
    monkeypatch.setenv("MPLBACKEND", "agg")
    nb = jupytext.read(NOTEBOOKS / name)
    client = nbclient.NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
        allow_errors=True,
    )
    before = sorted(os.listdir(NOTEBOOKS))
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    errors = _errors(nb)
    assert not errors, f"{name} raised {len(errors)} error(s); the first:\n{errors[0]}"
    shown = sum("image/png" in o.get("data", {}) for o in _outputs(nb))
    assert shown >= len(figures), f"{name} displayed {shown} figures inline"
    for figure in figures:
        path = out / figure
        assert path.is_file(), f"{name} did not write {figure}"
        assert path.stat().st_size > MIN_PNG_BYTES, f"{figure} is nearly empty"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{figure} is not a PNG"
    assert sorted(os.listdir(NOTEBOOKS)) == before, f"{name} wrote into notebooks/"
    print(f"{name}: {seconds:.0f} s")
