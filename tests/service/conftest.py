"""In-process app fixtures for the service tests."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from service.config import Settings
from service.main import create_app


def _make_client(**settings: Any) -> TestClient:
    base: dict[str, Any] = {"pool_kind": "process", "pool_size": 2}
    base.update(settings)
    return TestClient(create_app(Settings(**base)), raise_server_exceptions=False)


@pytest.fixture(scope="session")
def make_client() -> Callable[..., TestClient]:
    """make_client(**settings) -> TestClient over a fresh app; use it in a `with` block."""
    return _make_client


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """One app with a real process pool (2 workers) per test module."""
    with _make_client() as c:
        yield c
