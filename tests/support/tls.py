"""A throwaway certificate authority for TLS tests: a CA PEM file to trust and server contexts it signed."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

__all__ = ["JudgeCA", "judge_ca"]


@dataclass(frozen=True)
class JudgeCA:
    """A CA, its certificate as a PEM file, and a server certificate for 127.0.0.1 and localhost."""

    ca: trustme.CA
    ca_pem: Path
    server_cert: trustme.LeafCert

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.server_cert.configure_cert(context)
        return context


@pytest.fixture(scope="session")
def judge_ca(tmp_path_factory: pytest.TempPathFactory) -> JudgeCA:
    ca = trustme.CA()
    ca_pem = tmp_path_factory.mktemp("ca") / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_pem))
    return JudgeCA(ca=ca, ca_pem=ca_pem, server_cert=ca.issue_cert("127.0.0.1", "localhost"))
