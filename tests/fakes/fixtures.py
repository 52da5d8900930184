"""pytest fixtures for the fake Kubernetes API server (loaded from tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.kubeapi import FakeKubeAPI


@pytest.fixture
def kube_api() -> Iterator[FakeKubeAPI]:
    """A started fake API server on 127.0.0.1 with the default namespaces and Tessera's CRDs registered.

    Talk to it with `kube_api.client()` (a real `kubernetes.client.ApiClient`); seed and inspect objects
    directly with `seed`, `get`, `find`, `objects`, `modify`; inspect traffic with `requests_matching`.
    """
    api = FakeKubeAPI(bookmark_interval=0.2).start()
    try:
        yield api
    finally:
        api.stop()
