"""The tests run against a real broker: test/client-python.test.ts starts one (nats-server,
Postgres, broker) and runs pytest with RUNSTREAM_GRPC, RUNSTREAM_HTTP and RUNSTREAM_WS set (and RUNSTREAM_GRPC_TLS,
a TLS-terminating proxy in front of the gRPC port, with RUNSTREAM_TLS_CA, its certificate)."""

import os
import secrets
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run these tests through `make test` (test/client-python.test.ts)", 2)
    return value


@pytest.fixture(scope="session")
def grpc_target() -> str:
    return _env("RUNSTREAM_GRPC")


@pytest.fixture(scope="session")
def http_url() -> str:
    return _env("RUNSTREAM_HTTP")


@pytest.fixture(scope="session")
def ws_url() -> str:
    return _env("RUNSTREAM_WS")


@pytest.fixture(scope="session")
def tls_target() -> tuple[str, bytes]:
    """A TLS-terminating proxy in front of the broker's gRPC port, and its root certificate."""
    with open(_env("RUNSTREAM_TLS_CA"), "rb") as f:
        return _env("RUNSTREAM_GRPC_TLS"), f.read()


@pytest.fixture
def thread() -> str:
    return f"py-{secrets.token_hex(5)}"
