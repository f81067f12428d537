"""Throwaway certificate authorities, server and client certificates, made by the `openssl`
command at test time (EC P-256 keys: milliseconds each), for the /metrics TLS tests."""

from __future__ import annotations

import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Authority:
    """A CA that signs server and client certificates in ``folder``."""

    name: str
    folder: Path

    @property
    def cert(self) -> Path:
        return self.folder / f"{self.name}.crt"

    @classmethod
    def create(cls, folder: Path, name: str) -> Authority:
        folder.mkdir(parents=True, exist_ok=True)
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
                 "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)  # fmt: skip
        return cls(name, folder)

    def issue(self, name: str, sans: str, usage: str) -> Pair:
        """A certificate for ``sans`` ("DNS:x,IP:127.0.0.1") for ``usage`` (serverAuth,
        clientAuth), signed by this CA."""
        ext = self.folder / f"{name}.ext"
        ext.write_text(f"subjectAltName={sans}\nextendedKeyUsage={usage}\n")
        _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                 "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
                 cwd=self.folder)  # fmt: skip
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", self.cert.name, "-CAkey",
                 f"{self.name}.key", "-CAcreateserial", "-out", f"{name}.crt", "-days", "2",
                 "-extfile", ext.name, cwd=self.folder)  # fmt: skip
        return Pair(self.folder / f"{name}.crt", self.folder / f"{name}.key")


@dataclass(frozen=True)
class Pki:
    """Two CAs: ``ca`` (trusted by the server's config) and ``other`` (trusted by no one)."""

    ca: Authority
    other: Authority
    server: Pair  # localhost, 127.0.0.1 and ::1, by ``ca``
    server_by_other: Pair  # the same names by ``other``: a rotated certificate
    client: Pair  # "prometheus", by ``ca``
    stranger: Pair  # "prometheus" too, by ``other``

    @classmethod
    def create(cls, folder: Path) -> Pki:
        ca, other = Authority.create(folder, "ca"), Authority.create(folder, "other-ca")
        names = "DNS:localhost,IP:127.0.0.1,IP:::1"
        client = "DNS:prometheus,URI:spiffe://cluster.local/ns/monitoring/sa/prometheus"
        return cls(
            ca,
            other,
            ca.issue("server", names, "serverAuth"),
            other.issue("server-by-other", names, "serverAuth"),
            ca.issue("client", client, "clientAuth"),
            other.issue("stranger", client, "clientAuth"),
        )

    def client_context(
        self, trust: Authority | None = None, cert: Pair | None = None
    ) -> ssl.SSLContext:
        """What a scraper uses: trusts ``trust`` (default ``ca``), presents ``cert``."""
        ctx = ssl.create_default_context(cafile=str((trust or self.ca).cert))
        if cert is not None:
            ctx.load_cert_chain(str(cert.cert), str(cert.key))
        return ctx
