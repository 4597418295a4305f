"""The recipes in ``cluster/`` that cannot run here, validated as far as they can be."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests._clusters import REPO, recipe

CLUSTER = REPO / "cluster"
IMAGE = "ghcr.io/your-org/npt-dask:0.1.0"


def _yaml(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((CLUSTER / name).read_text()) if d]


def test_every_recipe_has_a_readme_and_every_script_compiles():
    for folder in ("local", "jobqueue", "kubernetes", "tls", "gpu"):
        readme = CLUSTER / folder / "README.md"
        assert readme.is_file(), readme
        assert "npt" in readme.read_text()
    scripts = sorted(CLUSTER.rglob("*.py"))
    assert len(scripts) >= 3
    for script in scripts:
        text = script.read_text()
        compile(text, str(script), "exec")  # a SyntaxError fails the test
        assert 'if __name__ == "__main__":' in text, f"{script}: workers spawn; guard main"


def test_scripts_use_the_current_dask_commands():
    dask = Path(sys.executable).with_name("dask")
    assert dask.exists() or shutil.which("dask")
    runnable = [p for p in CLUSTER.rglob("*") if p.suffix in (".py", ".yaml", "") and p.is_file()]
    for text in (p.read_text() for p in runnable):
        assert "dask-scheduler" not in text  # the old executables are gone
        assert "dask-worker " not in text
    for command in ("scheduler", "worker"):
        out = subprocess.run(
            [str(dask) if dask.exists() else "dask", command, "--help"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        for option in ("--tls-ca-file", "--tls-cert", "--tls-key", "--host", "--protocol"):
            assert option in out.stdout


def test_jobqueue_config_and_script():
    config = _yaml("jobqueue/jobqueue.yaml")[0]
    for system in ("slurm", "pbs"):
        section = config["jobqueue"][system]
        for key in ("cores", "memory", "processes", "walltime", "local-directory"):
            assert key in section, (system, key)
        assert any("activate" in line for line in section["job-script-prologue"])
    run = recipe("jobqueue/run.py")
    assert callable(run.make_cluster)
    assert callable(run.main)
    assert run._tls(None) is None
    tls = run._tls("certs")
    assert tls.cert.endswith("client.pem")


def test_kubernetes_manifests():
    (cluster,) = _yaml("kubernetes/daskcluster.yaml")
    assert cluster["apiVersion"] == "kubernetes.dask.org/v1"
    assert cluster["kind"] == "DaskCluster"
    name = cluster["metadata"]["name"]
    spec = cluster["spec"]
    assert spec["worker"]["replicas"] >= 1
    (worker,) = spec["worker"]["spec"]["containers"]
    (scheduler,) = spec["scheduler"]["spec"]["containers"]
    assert worker["args"][:2] == ["dask", "worker"]
    assert scheduler["args"][:2] == ["dask", "scheduler"]
    assert "--memory-limit" in worker["args"]
    assert "--local-directory" in worker["args"]
    ports = {p["name"]: p["port"] for p in spec["scheduler"]["service"]["ports"]}
    assert ports["tcp-comm"] == 8786
    assert spec["scheduler"]["service"]["selector"]["dask.org/cluster-name"] == name
    (job,) = _yaml("kubernetes/npt-job.yaml")
    assert job["kind"] == "Job"
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", "npt_dask"]
    assert f"tcp://{name}-scheduler:8786" in container["args"]
    assert {worker["image"], scheduler["image"], container["image"]} == {IMAGE}
    docker = (CLUSTER / "kubernetes" / "Dockerfile").read_text()
    assert "pip install" in docker
    assert "npt --help" in docker
    assert IMAGE in (CLUSTER / "kubernetes" / "README.md").read_text()


def test_referenced_entry_points_exist():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["npt"] == "npt_dask.interface.cli:main"
    out = subprocess.run(
        [sys.executable, "-m", "npt_dask", "project", "--help"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    for option in ("--scheduler", "--scheduler-file", "--tls-ca-file", "--tls-cert", "--tls-key"):
        assert option in out.stdout


def test_tls_script_makes_a_verifiable_chain(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    paths = recipe("tls/make_certs.py").make_certs(tmp_path)
    for role in ("scheduler", "worker", "client"):
        subprocess.run(
            ["openssl", "verify", "-CAfile", str(paths["ca"]), str(paths[role])],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        assert paths[f"{role}-key"].stat().st_mode & 0o077 == 0


def test_gpu_recipe_starts_a_cuda_cluster_or_names_the_extra(monkeypatch, capsys, tmp_path):
    run = recipe("gpu/cuda_cluster.py")
    readme = (CLUSTER / "gpu" / "README.md").read_text()
    for needed in ("LocalCUDACluster", "rmm_pool_size", "CUDA_VISIBLE_DEVICES", "--device gpu",
                   "npt.connect(gpu=True", "pip install 'npt-dask[gpu]'"):  # fmt: skip
        assert needed in readme, needed
    monkeypatch.setitem(sys.modules, "dask_cuda", None)  # as on a machine without the extra
    assert run.main(["--scheduler-file", str(tmp_path / "s.json"), "--devices", "0"]) == 2
    assert "pip install 'npt-dask[gpu]'" in capsys.readouterr().err
    assert not (tmp_path / "s.json").exists()
