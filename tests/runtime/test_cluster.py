"""``npt_dask.runtime.cluster``: connect, TLS settings, the embedded layout, the CLI options."""

from __future__ import annotations

import argparse
import json
import socket

import pytest
from distributed import Client

import npt_dask as npt
from npt_dask.interface.cli import options
from npt_dask.runtime import scheduler as _scheduler
from npt_dask.runtime.cluster import TLSConfig, connect, default_layout, spill_directory


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once the socket is closed


def test_embedded_cluster_is_closed_with_the_client(tmp_path):
    with connect(n_workers=1, threads_per_worker=1, local_directory=tmp_path) as client:
        cluster = client.cluster
        assert _scheduler.current_client() is client
        workers = client.scheduler_info()["workers"].values()
        assert [w["nthreads"] for w in workers] == [1]
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        assert client.submit(sum, [1, 2]).result() == 3
    assert cluster.status.name == "closed"
    assert _scheduler.current_client() is None


def test_existing_cluster_is_left_running(tmp_path):
    with connect(n_workers=1, threads_per_worker=1, local_directory=tmp_path) as owner:
        address = owner.scheduler.address
        info = tmp_path / "scheduler.json"
        info.write_text(json.dumps({"address": address}))
        with connect(address) as guest:
            assert guest.submit(sum, [2, 2]).result() == 4
        with connect(scheduler_file=info) as guest:
            assert guest.scheduler_info()["address"] == address
        assert owner.submit(sum, [3, 3]).result() == 6  # still up


def test_unanswered_address_fails_fast_and_clearly():
    address = f"tcp://127.0.0.1:{_free_port()}"
    with pytest.raises(npt.ClusterError, match=r"No dask scheduler answered at tcp://127\.0\.0\.1"):
        connect(address, timeout=1)
    assert issubclass(npt.ClusterError, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"address": "tcp://h:1", "scheduler_file": "s.json"}, npt.InputError, "not both"),
        ({"address": "tcp://h:1", "n_workers": 2}, npt.InputError, "embedded LocalCluster"),
        ({"address": "tls://h:1"}, npt.InputError, "TLSConfig"),
        ({"address": "http://h:1"}, npt.InputError, "unknown protocol"),
        ({"address": 8786}, npt.InputTypeError, "string"),
        ({"tls": "ca.pem"}, npt.InputTypeError, "TLSConfig or a dict"),
        ({"address": "tcp://h:1", "tls": {"ca_file": "a", "cert": "b"}}, npt.InputError, "tls://"),
        ({"scheduler_file": "/nonexistent/s.json"}, npt.ClusterError, "cannot be read"),
        ({"tls": {"ca_file": "a", "cert": "b"}}, npt.InputError, "existing tls:// scheduler"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        connect(**kwargs)


def test_tls_config_round_trip_and_checks(tmp_path):
    tls = TLSConfig(tmp_path / "ca.pem", cert=tmp_path / "c.pem")
    assert TLSConfig.from_dict(tls.to_dict()) == tls
    assert isinstance(tls.ca_file, str)
    with pytest.raises(AttributeError):
        tls.cert = "x"
    with pytest.raises(npt.InputError, match="Unknown TLS settings"):
        TLSConfig.from_dict({"ca_file": "a", "cert": "b", "password": "c"})
    with pytest.raises(npt.InputError, match="lack"):
        TLSConfig.from_dict({"ca_file": "a"})
    with pytest.raises(npt.InputTypeError, match="PEM"):
        TLSConfig("", cert="c.pem")
    with pytest.raises(npt.InputError, match="not readable"):
        tls.security()


def test_default_layout_rule():
    assert default_layout(cores=2, memory=24 * 2**30) == (2, 1, 9 * 2**30)
    assert default_layout(cores=4, memory=8 * 2**30) == (4, 1, 3 * 2**29)
    assert default_layout(cores=16, memory=64 * 2**30) == (4, 4, 12 * 2**30)
    assert default_layout(cores=6, memory=6 * 2**30)[:2] == (3, 2)
    n, threads, limit = default_layout()
    assert n * threads >= 1
    assert limit > 0
    assert spill_directory().is_absolute()


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    options.cluster_options(parser)
    return parser.parse_args(argv)


def test_cli_options_make_the_client(tmp_path):
    with options.client_from_args(_args()) as client:
        assert client is None  # no options: local threads
    with connect(n_workers=1, threads_per_worker=1, local_directory=tmp_path) as owner:
        address = owner.scheduler.address
        (tmp_path / "s.json").write_text(json.dumps({"address": address}))
        for argv in (["--scheduler", address], ["--scheduler-file", str(tmp_path / "s.json")]):
            with options.client_from_args(_args(*argv)) as client:
                assert isinstance(client, Client)
                assert client.scheduler_info()["address"] == address
    with (
        pytest.raises(npt.InputError, match="--tls-ca-file"),
        options.client_from_args(_args("--tls-cert", "c.pem")),
    ):
        pass


def test_retry_on_lost_data_reruns_only_lost_dependencies():
    from distributed.client import FutureCancelledError

    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise FutureCancelledError("k", "lost dependencies")
        return 7

    assert _scheduler.retry_on_lost_data(flaky) == 7
    assert len(calls) == 3

    def cancelled():
        calls.append(1)
        raise FutureCancelledError("k", "scheduler-connection-lost")

    calls.clear()
    with pytest.raises(FutureCancelledError):
        _scheduler.retry_on_lost_data(cancelled)
    assert len(calls) == 1  # anything but lost dependencies is not retried

    def always_lost():
        calls.append(1)
        raise FutureCancelledError("k", "lost dependencies")

    calls.clear()
    with pytest.raises(FutureCancelledError):
        _scheduler.retry_on_lost_data(always_lost, attempts=2)
    assert len(calls) == 2
