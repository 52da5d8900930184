"""Lease-based leader election on the real API server, as the scheduler's ServiceAccount with the chart's
leader-election Role (create, and get/update of the one Lease it names): one leader, a standby takes over."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from scheduler.kube.leader import LeaseElector
from tests.controlplane.faultproxy import FaultProxy
from tests.controlplane.install import LEASE_NAME, RELEASE_NAMESPACE
from tests.controlplane.scene import Scene, wait_until

pytestmark = pytest.mark.apiserver


@pytest.fixture
def coordination(scene: Scene) -> Iterator[client.CoordinationV1Api]:
    admin = client.CoordinationV1Api(scene.admin)
    try:
        admin.delete_namespaced_lease(LEASE_NAME, RELEASE_NAMESPACE)  # a fresh election for each test
    except client.ApiException as exc:
        if exc.status != 404:
            raise
    yield client.CoordinationV1Api(scene.tessera.scheduler_client())


def _elector(api: client.CoordinationV1Api, identity: str, log: list[str], scene: Scene) -> LeaseElector:
    elector = LeaseElector(
        api,
        name=LEASE_NAME,
        namespace=RELEASE_NAMESPACE,
        identity=identity,
        lease_duration_s=1.0,
        renew_deadline_s=0.8,
        retry_period_s=0.1,
        on_started_leading=lambda: log.append(f"start {identity}"),
        on_stopped_leading=lambda: log.append(f"stop {identity}"),
    )
    scene.on_cleanup(elector.stop)
    return elector


def _lease(scene: Scene) -> client.V1LeaseSpec:
    spec = client.CoordinationV1Api(scene.admin).read_namespaced_lease(LEASE_NAME, RELEASE_NAMESPACE).spec
    assert spec is not None
    return spec


def test_one_leader_and_release_hands_over_at_once(
    scene: Scene, coordination: client.CoordinationV1Api
) -> None:
    log: list[str] = []
    a = _elector(coordination, "a", log, scene).start()
    wait_until(a.is_leader.is_set)
    b = _elector(coordination, "b", log, scene).start()
    assert not b.is_leader.wait(0.5)
    assert _lease(scene).holder_identity == "a"
    a.stop(release=True)
    wait_until(b.is_leader.is_set, timeout=3)
    lease = _lease(scene)
    assert lease.holder_identity == "b" and lease.lease_transitions == 1
    assert log == ["start a", "stop a", "start b"]


def test_standby_takes_over_when_the_leader_dies(
    scene: Scene, coordination: client.CoordinationV1Api
) -> None:
    log: list[str] = []
    a = _elector(coordination, "a", log, scene).start()
    wait_until(a.is_leader.is_set)
    b = _elector(coordination, "b", log, scene).start()
    a.stop(release=False)  # crashed: no release, the lease must expire
    wait_until(b.is_leader.is_set, timeout=4)
    assert _lease(scene).holder_identity == "b"


def test_leader_steps_down_when_it_cannot_renew(
    scene: Scene, coordination: client.CoordinationV1Api, fault_proxy: FaultProxy
) -> None:
    log: list[str] = []
    proxied = client.CoordinationV1Api(fault_proxy.client(scene.tessera.scheduler_token))
    a = _elector(proxied, "a", log, scene).start()
    wait_until(a.is_leader.is_set)
    fault_proxy.fail("*", rf"/leases/{LEASE_NAME}$", 503, times=1000)
    wait_until(lambda: not a.is_leader.is_set(), timeout=3)
    assert log == ["start a", "stop a"]


def test_another_lease_is_forbidden_by_the_chart(
    scene: Scene, coordination: client.CoordinationV1Api
) -> None:
    """The chart's Role names one Lease: an elector configured with another name cannot take it over."""
    admin = client.CoordinationV1Api(scene.admin)
    admin.create_namespaced_lease(RELEASE_NAMESPACE, {"metadata": {"name": "other"}, "spec": {}})
    scene.on_cleanup(lambda: admin.delete_namespaced_lease("other", RELEASE_NAMESPACE))
    elector = LeaseElector(coordination, name="other", namespace=RELEASE_NAMESPACE, identity="x")
    assert not elector.try_acquire_or_renew()


def test_a_leader_whose_renewals_are_slow_steps_down_before_its_lease_expires(
    scene: Scene, coordination: client.CoordinationV1Api, fault_proxy: FaultProxy
) -> None:
    """Never two leaders: renewals answered later than the renew deadline must not keep a leader leading
    while a standby, seeing the lease expire, takes over."""
    log: list[str] = []
    proxied = client.CoordinationV1Api(fault_proxy.client(scene.tessera.scheduler_token))
    a = _elector(proxied, "a", log, scene).start()
    wait_until(a.is_leader.is_set)
    b = _elector(coordination, "b", log, scene).start()
    fault_proxy.slow("*", rf"/leases/{LEASE_NAME}$", 1.5, times=1000)  # the API answers a, but slowly
    both = 0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not (b.is_leader.is_set() and not a.is_leader.is_set()):
        both += a.is_leader.is_set() and b.is_leader.is_set()
        time.sleep(0.01)
    assert b.is_leader.is_set() and not a.is_leader.is_set()
    assert both == 0, "a and b led at the same time"
    assert log[:2] == ["start a", "stop a"]
