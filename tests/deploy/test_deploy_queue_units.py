"""The Queue CRD on the real API server takes what users write on pods (cores, quantity strings), refuses
what the model refuses, with the same rules, and what it stores reads back as the model's values."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from pydantic import ValidationError

from scheduler.api.queue import Queue
from scheduler.sandbox.controlplane import ControlPlane

pytestmark = pytest.mark.apiserver
CRDS = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "tessera" / "crds"
G = "scheduling.tessera.dev"

CASES: list[tuple[dict[str, Any], bool]] = [
    ({"cpu": {"quota": 64, "limit": "128"}}, True),
    ({"cpu": {"quota": "500m", "limit": "0.5"}}, True),
    ({"cpu": {"quota": "1.5", "limit": -1}}, True),
    ({"memory": {"quota": "256Gi", "limit": "1Ti"}}, True),
    ({"memory": {"quota": 1073741824}}, True),
    ({"gpu": {"quota": 2.5, "limit": 4}, "cpu": {"quota": "-1"}}, True),
    ({}, True),
    ({"cpu": {"quota": 0.5}}, False),  # a bare fraction: quote it, as for any CRD quantity
    ({"cpu": {"quota": -2}}, False),
    ({"cpu": {"quota": "lots"}}, False),
    ({"memory": {"quota": "-5Gi"}}, False),
    ({"memory": {"quota": "2Gi", "limit": "1Gi"}}, False),  # limit below quota, compared as quantities
    ({"cpu": {"quota": 8, "limit": "500m"}}, False),
    ({"gpu": {"quota": 4, "limit": 2}}, False),
]


@pytest.fixture(scope="module")
def queues_api(control_plane: ControlPlane) -> client.CustomObjectsApi:
    control_plane.kubectl("apply", "-f", str(CRDS))
    control_plane.kubectl("wait", "--for", "condition=established", "--timeout=30s", "-f", str(CRDS))
    return client.CustomObjectsApi(control_plane.client())


@pytest.mark.parametrize(("resources", "valid"), CASES, ids=[str(r) for r, _ in CASES])
def test_server_and_model_agree(
    queues_api: client.CustomObjectsApi, resources: dict[str, Any], valid: bool
) -> None:
    name = f"units-{uuid.uuid4().hex[:8]}"
    body = {
        "apiVersion": f"{G}/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"resources": resources},
    }
    try:
        model: Queue | None = Queue.model_validate(body)
    except ValidationError:
        model = None
    assert (model is not None) == valid
    try:
        queues_api.create_cluster_custom_object(G, "v1alpha1", "queues", body)
    except client.ApiException as exc:
        assert not valid, exc.body
        assert exc.status == 422
        return
    try:
        assert valid, "the API server took what the model refuses"
        stored = Queue.model_validate(queues_api.get_cluster_custom_object(G, "v1alpha1", "queues", name))
        assert model is not None and stored.spec == model.spec
    finally:
        queues_api.delete_cluster_custom_object(G, "v1alpha1", "queues", name)
