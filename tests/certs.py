"""A throwaway certificate authority and the certificates it signs (openssl), for https tests."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")  # quicker to make than RSA


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


class Authority:
    """A CA made for one test: `issue` signs a server certificate for 127.0.0.1."""

    def __init__(self, directory: Path, name: str = "test-ca") -> None:
        if shutil.which("openssl") is None:
            pytest.skip("needs the openssl command (Debian: openssl)")
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cert, self.key = self.dir / f"{name}.pem", self.dir / f"{name}.key"
        _openssl(
            "req", "-x509", *KEY, "-nodes", "-days", "2",
            "-subj", f"/CN={name}", "-keyout", str(self.key), "-out", str(self.cert),
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        )  # fmt: skip

    def issue(self, name: str, subject_alt: str = "IP:127.0.0.1") -> Pair:
        key, csr, cert = (self.dir / f"{name}{end}" for end in (".key", ".csr", ".pem"))
        _openssl(
            "req", "-new", *KEY, "-nodes", "-subj", f"/CN={name}",
            "-keyout", str(key), "-out", str(csr),
        )  # fmt: skip
        ext = self.dir / f"{name}.ext"
        ext.write_text(f"subjectAltName={subject_alt}\nextendedKeyUsage=serverAuth,clientAuth\n")
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
            "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert),
        )  # fmt: skip
        return Pair(cert, key)
