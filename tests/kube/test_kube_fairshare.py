"""Time-based fair share on the real kube-apiserver: the usage history survives a scheduler restart.

The scheduler runs with the chart's RBAC for the history's ConfigMap (rendered with
`scheduler.timeBasedFairShare.enabled`). team-a holds every GPU for a while and stops; the scheduler
saves, stops, and a new one starts, with team-a's and team-b's pods already waiting. From its first cycle
the new scheduler divides by the saved history: team-b, which used nothing, gets the GPUs."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.usage import HISTORY_KEY, UsageHistoryRecord
from scheduler.cycle import SchedulerConfig
from scheduler.queues.usage_history import UsageParams
from tests.controlplane.install import RELEASE_NAMESPACE
from tests.controlplane.scene import Scene, runner_config, wait_until
from tests.deploy.deploy_support import render_chart
from tests.kube.helpers import pod_body

pytestmark = pytest.mark.apiserver

CONFIGMAP = "tessera-usage-history"
# No decay and a long window: team-a's share stays 0 for seconds after the restart (the test's margin).
PARAMS = UsageParams(window_s=3600, half_life_s=None, k_value=10, resolution_s=1, persist_s=0.5)


def usage_rbac(scene: Scene) -> None:
    """The chart's Role and RoleBinding for the history, applied as the operator would."""
    objects = render_chart.render({"scheduler": {"timeBasedFairShare": {"enabled": True}}})
    rbac = [o for o in objects if o["kind"] in ("Role", "RoleBinding") and "usage" in o["metadata"]["name"]]
    assert len(rbac) == 2
    scene.cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(rbac))
    rbac_api = client.RbacAuthorizationV1Api(scene.admin)

    def remove() -> None:
        for o in rbac:
            delete = (
                rbac_api.delete_namespaced_role
                if o["kind"] == "Role"
                else rbac_api.delete_namespaced_role_binding
            )
            delete(o["metadata"]["name"], RELEASE_NAMESPACE)
        try:
            scene.core.delete_namespaced_config_map(CONFIGMAP, RELEASE_NAMESPACE)
        except ApiException as exc:
            if exc.status != 404:
                raise

    scene.on_cleanup(remove)


def queue(scene: Scene, name: str) -> None:
    scene.queue(name, {"resources": {"gpu": {"quota": 0, "overQuotaWeight": 1}}})


def team_pod(team: str, i: int) -> dict[str, Any]:
    return pod_body(f"{team}-{i}", labels={"tessera.dev/queue": team}, limits={"nvidia.com/gpu": "1"})


def bound_by_team(scene: Scene) -> dict[str, int]:
    out: dict[str, int] = {}
    for name in scene.bound():
        team = name.rsplit("-", 1)[0]
        out[team] = out.get(team, 0) + 1
    return out


def saved(scene: Scene) -> UsageHistoryRecord | None:
    try:
        cm = scene.core.read_namespaced_config_map(CONFIGMAP, RELEASE_NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return UsageHistoryRecord.model_validate_json((cm.data or {})[HISTORY_KEY])


def fair_share(scene: Scene, q: str) -> float | None:
    status = scene.get("queues", q, namespaced=False).get("status") or {}
    return (status.get("fairShare") or {}).get("gpu")


def test_usage_history_survives_a_restart(scene: Scene) -> None:
    usage_rbac(scene)
    scene.node("gpu-1", gpus=4)
    queue(scene, "team-a")
    queue(scene, "team-b")
    scene.kubelet()
    config = runner_config(scheduler=SchedulerConfig(expected_nodes=4, max_gpus_per_node=8, usage=PARAMS),
                           usage_namespace=RELEASE_NAMESPACE, usage_configmap=CONFIGMAP)  # fmt: skip
    first = scene.scheduler(config)
    for i in range(4):
        scene.create_pod(team_pod("team-a", i))
    wait_until(lambda: bound_by_team(scene) == {"team-a": 4})
    time.sleep(8)  # team-a holds the whole cluster
    for i in range(4):
        scene.core.delete_namespaced_pod(f"team-a-{i}", scene.ns, grace_period_seconds=0)
    wait_until(lambda: not scene.bound())
    first.stop()  # saves what it recorded since its last save
    record = saved(scene)
    assert record is not None and record.buckets
    held = sum(b.queues["team-a"].gpu for b in record.buckets if "team-a" in b.queues)
    capacity = sum(b.capacity.gpu for b in record.buckets)
    assert held >= 4 * 7 and held / capacity > 0.6  # GPU-seconds: 4 GPUs for about 8 s, most of the run
    assert not any("team-b" in b.queues for b in record.buckets)

    for i in range(4):  # both teams wait before the new scheduler's first cycle
        scene.create_pod(team_pod("team-b", i))
        scene.create_pod(team_pod("team-a", i + 4))
    second = scene.scheduler(config)
    wait_until(lambda: bound_by_team(scene).get("team-b") == 4, timeout=15)
    assert bound_by_team(scene) == {"team-b": 4}
    assert second.scheduler.fairshare is not None and second.scheduler.fairshare.loaded
    assert fair_share(scene, "team-a") == 0 and fair_share(scene, "team-b") == 4
    evicted = [e for e in scene.events_for("team-b-0") if e.get("reason") == "Evicted"]
    assert evicted == []  # placed by allocate from the first cycle on, not after a reclaim


def test_the_store_keeps_what_it_cannot_read_and_never_writes_blind(scene: Scene) -> None:
    from scheduler.kube.usage_store import UNREADABLE_KEY, ConfigMapUsageStore
    from scheduler.queues.usage_store import UsageStoreError

    name = f"usage-{scene.ns}"
    # Without the chart's Role the scheduler's account may not read it: an error, never a blind save.
    denied = ConfigMapUsageStore(client.CoreV1Api(scene.tessera.scheduler_client()), RELEASE_NAMESPACE, name)
    with pytest.raises(UsageStoreError, match="403"):
        denied.load()
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={HISTORY_KEY: "not json {"})
    scene.core.create_namespaced_config_map(RELEASE_NAMESPACE, body)
    scene.on_cleanup(lambda: scene.core.delete_namespaced_config_map(name, RELEASE_NAMESPACE))
    store = ConfigMapUsageStore(client.CoreV1Api(scene.admin), RELEASE_NAMESPACE, name)
    assert store.load() is None  # not a history: a new one is started...
    store.save(UsageHistoryRecord(saved_at=1.0))
    data = scene.core.read_namespaced_config_map(name, RELEASE_NAMESPACE).data
    assert data[UNREADABLE_KEY] == "not json {"  # ...and what was there is kept aside
    assert UsageHistoryRecord.model_validate_json(data[HISTORY_KEY]).saved_at == 1.0
