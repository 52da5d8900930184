"""Lease-based leader election against the fake API server: one leader, a standby takes over."""

from __future__ import annotations

from kubernetes import client

from scheduler.kube.leader import LeaseElector
from tests.fakes.kubeapi import FakeKubeAPI
from tests.kube.helpers import wait_for


def _elector(kube_api: FakeKubeAPI, identity: str, log: list[str]) -> LeaseElector:
    return LeaseElector(
        client.CoordinationV1Api(kube_api.client()),
        name="tessera-scheduler",
        namespace="kube-system",
        identity=identity,
        lease_duration_s=1.0,
        renew_deadline_s=0.8,
        retry_period_s=0.1,
        on_started_leading=lambda: log.append(f"start {identity}"),
        on_stopped_leading=lambda: log.append(f"stop {identity}"),
    )


def test_one_leader_and_release_hands_over_at_once(kube_api: FakeKubeAPI) -> None:
    log: list[str] = []
    a = _elector(kube_api, "a", log).start()
    wait_for(a.is_leader.is_set)
    b = _elector(kube_api, "b", log).start()
    try:
        assert not b.is_leader.wait(0.5)
        assert kube_api.get("leases", "tessera-scheduler", "kube-system")["spec"]["holderIdentity"] == "a"
        a.stop(release=True)
        wait_for(b.is_leader.is_set, timeout=3)
        lease = kube_api.get("leases", "tessera-scheduler", "kube-system")["spec"]
        assert lease["holderIdentity"] == "b" and lease["leaseTransitions"] == 1
        assert log == ["start a", "stop a", "start b"]
    finally:
        b.stop()


def test_standby_takes_over_when_the_leader_dies(kube_api: FakeKubeAPI) -> None:
    log: list[str] = []
    a = _elector(kube_api, "a", log).start()
    wait_for(a.is_leader.is_set)
    b = _elector(kube_api, "b", log).start()
    try:
        a.stop(release=False)  # crashed: no release, the lease must expire
        wait_for(b.is_leader.is_set, timeout=4)
        assert kube_api.get("leases", "tessera-scheduler", "kube-system")["spec"]["holderIdentity"] == "b"
    finally:
        b.stop()


def test_leader_steps_down_when_it_cannot_renew(kube_api: FakeKubeAPI) -> None:
    log: list[str] = []
    a = _elector(kube_api, "a", log).start()
    try:
        wait_for(a.is_leader.is_set)
        kube_api.fail_next("*", r"/leases/tessera-scheduler$", code=503, times=1000)
        wait_for(lambda: not a.is_leader.is_set(), timeout=3)
        assert log == ["start a", "stop a"]
    finally:
        a.stop()
