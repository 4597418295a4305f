"""Make a certificate authority and scheduler/worker/client certificates for a dask cluster.

Uses the ``openssl`` command line (OpenSSL 1.1.1 or newer)::

    python cluster/tls/make_certs.py certs/ --hosts 127.0.0.1,localhost,scheduler.example.org

writes into ``certs/``::

    ca.pem ca-key.pem                    the authority (keep ca-key.pem offline)
    scheduler.pem scheduler-key.pem      for 'dask scheduler --tls-cert/--tls-key'
    worker.pem worker-key.pem            for 'dask worker --tls-cert/--tls-key'
    client.pem client-key.pem            for npt-dask (TLSConfig / --tls-cert/--tls-key)

Every certificate is signed by ``ca.pem`` and carries the given hosts as
subject alternative names; dask requires mutual TLS, so the scheduler
refuses clients without a certificate from this authority.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ROLES", "main", "make_certs"]

ROLES = ("scheduler", "worker", "client")


def _openssl(*args: str) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise FileNotFoundError("the 'openssl' command is needed to make certificates")
    subprocess.run([exe, *args], check=True, capture_output=True, timeout=120)


def _san(hosts: Sequence[str]) -> str:
    entries = []
    for host in hosts:
        is_ip = host.replace(".", "").isdigit() or ":" in host
        entries.append(f"{'IP' if is_ip else 'DNS'}:{host}")
    return ",".join(entries)


def make_certs(
    out: str | os.PathLike,
    *,
    hosts: Sequence[str] = ("127.0.0.1", "localhost"),
    days: int = 365,
    name: str = "npt-dask",
) -> dict[str, Path]:
    """Write a CA and one certificate per role into ``out``; return the paths by file stem."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    ca, ca_key = out / "ca.pem", out / "ca-key.pem"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key),
        "-out", str(ca), "-days", str(days), "-subj", f"/CN={name} CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=keyCertSign,cRLSign",
    )  # fmt: skip
    paths = {"ca": ca, "ca-key": ca_key}
    with tempfile.TemporaryDirectory() as tmp:
        ext = Path(tmp) / "ext.cnf"
        ext.write_text(
            f"subjectAltName={_san(hosts)}\nbasicConstraints=CA:FALSE\n"
            "keyUsage=digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
        )
        for role in ROLES:
            cert, key, csr = out / f"{role}.pem", out / f"{role}-key.pem", Path(tmp) / "r.csr"
            _openssl(
                "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
                "-subj", f"/CN={name} {role}",
            )  # fmt: skip
            _openssl(
                "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                "-CAcreateserial", "-out", str(cert), "-days", str(days), "-extfile", str(ext),
            )  # fmt: skip
            paths[role], paths[f"{role}-key"] = cert, key
    for path in out.glob("*-key.pem"):
        path.chmod(0o600)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``make_certs.py OUT [--hosts H1,H2] [--days N]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="directory to write the PEM files into")
    parser.add_argument("--hosts", default="127.0.0.1,localhost", help="comma-separated")
    parser.add_argument("--days", type=int, default=365, help="validity")
    args = parser.parse_args(argv)
    paths = make_certs(args.out, hosts=args.hosts.split(","), days=args.days)
    for stem, path in paths.items():
        print(f"{stem:15s} {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
