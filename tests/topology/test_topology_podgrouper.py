"""The podgrouper carries a workload's topology annotations into the PodGroup it writes, as KAI's
podgrouper does (`kai.scheduler/topology`, `...-required-placement`, `...-preferred-placement` on the
top owner; Tessera's `tessera.dev/topology...` too)."""

from __future__ import annotations

from typing import Any

from scheduler.kube.podgrouper.grouper import group_for_pod
from scheduler.kube.podgrouper.walk import Chain


def job(annotations: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "train", "namespace": "ml", "uid": "job-1", "annotations": annotations},
            "spec": {"parallelism": 4, "completions": 4}}  # fmt: skip


def pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train-0", "namespace": "ml", "uid": "pod-1",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                              "uid": "job-1", "controller": True}]},
            "spec": {"schedulerName": "tessera"}}  # fmt: skip


def test_kai_workload_annotations_become_the_groups_constraint() -> None:
    kai = {"kai.scheduler/topology": "dc", "kai.scheduler/topology-required-placement": "rack",
           "kai.scheduler/topology-preferred-placement": "nvlink"}  # fmt: skip
    g = group_for_pod(pod(), Chain((job(kai),)))
    assert g is not None
    assert g.to_podgroup()["spec"]["topologyConstraint"] == {
        "topology": "dc", "requiredTopologyLevel": "rack", "preferredTopologyLevel": "nvlink",
    }  # fmt: skip


def test_no_annotations_no_constraint() -> None:
    g = group_for_pod(pod(), Chain((job({}),)))
    assert g is not None and "topologyConstraint" not in g.to_podgroup()["spec"]
