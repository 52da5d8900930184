"""RBAC: every permission a component needs is granted, nothing more, no wildcards, each rule explained."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.deploy.deploy_support import CHART, CUSTOM_VALUES, MANIFESTS, Manifest, find, load_yaml_docs, one

Need = tuple[str, str, str]  # (apiGroup, resource, verb)

# What each component does against the API (DESIGN.md, issues 5 and 7), as (group, resource, verb).
SCHEDULER_NEEDS: list[Need] = [
    *[("", "pods", v) for v in ("get", "list", "watch", "patch", "update")],
    ("", "pods/binding", "create"),
    ("", "pods/eviction", "create"),
    ("", "pods/status", "patch"),
    *[("", "nodes", v) for v in ("get", "list", "watch")],
    ("", "events", "create"),
    ("", "events", "patch"),
    *[("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")],
    *[("scheduling.tessera.dev", "queues", v) for v in ("get", "list", "watch")],
    ("scheduling.tessera.dev", "queues/status", "update"),
    *[("scheduling.tessera.dev", "podgroups", v) for v in ("get", "list", "watch", "create", "patch")],
    ("scheduling.tessera.dev", "podgroups/status", "update"),
    *[("scheduling.tessera.dev", "gpunodereports", v) for v in ("get", "list", "watch")],
    ("scheduling.k8s.io", "priorityclasses", "list"),
    ("scheduling.k8s.io", "priorityclasses", "watch"),
    ("batch", "jobs", "get"),
    ("apps", "replicasets", "get"),
]
AGENT_NEEDS: list[Need] = [
    *[("", "pods", v) for v in ("get", "list", "watch")],
    *[("scheduling.tessera.dev", "gpunodereports", v) for v in ("get", "create", "update", "patch")],
    ("", "events", "create"),
]
DEVICE_PLUGIN_NEEDS: list[Need] = [*[("", "pods", v) for v in ("list", "watch", "patch")]]
# Things no Tessera component may do.
FORBIDDEN: list[Need] = [
    ("", "secrets", "get"),
    ("", "secrets", "list"),
    ("", "pods", "delete"),
    ("", "pods", "create"),
    ("", "nodes", "update"),
    ("", "nodes", "delete"),
    ("scheduling.tessera.dev", "queues", "create"),
    ("scheduling.tessera.dev", "queues", "delete"),
    ("rbac.authorization.k8s.io", "clusterroles", "bind"),
    ("", "pods/exec", "create"),
    ("", "serviceaccounts/token", "create"),
]


def allows(rules: list[dict[str, Any]], need: Need) -> bool:
    group, resource, verb = need
    return any(
        group in r.get("apiGroups", []) and resource in r.get("resources", []) and verb in r.get("verbs", [])
        for r in rules
    )


def rules_of(objects: list[Manifest], account: str) -> list[dict[str, Any]]:
    """All rules bound to a service account, through ClusterRoleBindings and RoleBindings."""
    roles = {
        (o["kind"], o["metadata"]["name"]): o for o in find(objects, "ClusterRole") + find(objects, "Role")
    }
    out: list[dict[str, Any]] = []
    for binding in find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding"):
        if any(s["name"] == account for s in binding["subjects"]):
            out += roles[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]["rules"]
    return out


def _all_role_sets(render: Callable[..., list[Manifest]]) -> dict[str, list[Manifest]]:
    sets = {"manifests": load_yaml_docs(MANIFESTS / "tessera.yaml"), "default": render({})}
    sets.update({name: render(values) for name, values in CUSTOM_VALUES.items()})
    return sets


def test_no_wildcards_anywhere(render: Callable[..., list[Manifest]]) -> None:
    for name, objects in _all_role_sets(render).items():
        roles = find(objects, "ClusterRole") + find(objects, "Role")
        assert roles, name
        for role in roles:
            assert "aggregationRule" not in role
            for rule in role["rules"]:
                for key in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
                    assert "*" not in rule.get(key, []), f"{name}: {role['metadata']['name']} has {key}: *"
                    assert not any("*" in v for v in rule.get(key, [])), f"{name}: {role['metadata']['name']}"


def test_plain_manifests_have_no_wildcards_without_helm() -> None:
    """The same check on the committed manifests, so it runs even where the chart cannot be rendered."""
    text = (MANIFESTS / "tessera.yaml").read_text()
    for role in find(load_yaml_docs(MANIFESTS / "tessera.yaml"), "ClusterRole"):
        for rule in role["rules"]:
            assert all("*" not in v for key in ("apiGroups", "resources", "verbs") for v in rule[key])
    assert not re.search(r"verbs:\s*\[[^\]]*\*", text)


@pytest.mark.parametrize(
    ("account", "needs"),
    [
        ("tessera-scheduler", SCHEDULER_NEEDS),
        ("tessera-agent", AGENT_NEEDS),
        ("tessera-device-plugin", DEVICE_PLUGIN_NEEDS),
    ],
)
def test_components_get_what_they_need(
    default_objects: list[Manifest], account: str, needs: list[Need]
) -> None:
    rules = rules_of(default_objects, account)
    missing = [n for n in needs if not allows(rules, n)]
    assert not missing, f"{account} lacks {missing}"


# The scheduler deletes a victim whose eviction a disruption budget refused (the default,
# scheduler.preemption.disruptionBudgets: delete, as KAI Scheduler's scheduler does): nothing else.
GRANTED_BY_CHOICE = {"tessera-scheduler": [("", "pods", "delete")]}


@pytest.mark.parametrize("account", ["tessera-scheduler", "tessera-agent", "tessera-device-plugin"])
def test_components_get_nothing_dangerous(default_objects: list[Manifest], account: str) -> None:
    rules = rules_of(default_objects, account)
    granted = [n for n in FORBIDDEN if allows(rules, n) and n not in GRANTED_BY_CHOICE.get(account, [])]
    assert not granted, f"{account} may {granted}"


def test_the_scheduler_deletes_pods_only_when_budgets_are_overridden(
    render: Callable[..., list[Manifest]],
) -> None:
    respect = render({"scheduler": {"preemption": {"disruptionBudgets": "respect", "maxVictimGrace": "30s"}}})
    assert not allows(rules_of(respect, "tessera-scheduler"), ("", "pods", "delete"))
    args = one(respect, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--disruption-budgets=respect" in args


@pytest.mark.parametrize("account", ["tessera-agent", "tessera-device-plugin"])
def test_node_accounts_cannot_write_what_only_the_scheduler_writes(
    default_objects: list[Manifest], account: str
) -> None:
    rules = rules_of(default_objects, account)
    for need in [
        ("", "pods", "update"),
        ("", "pods/binding", "create"),
        ("", "pods/eviction", "create"),
        ("scheduling.tessera.dev", "queues/status", "patch"),
    ]:
        assert not allows(rules, need), need
    # Only the scheduler's leases: the lease rule that allows get/update names it.
    lease_rules = [r for r in rules_of(default_objects, "tessera-scheduler") if "leases" in r["resources"]]
    assert all(r.get("resourceNames") for r in lease_rules if {"get", "update"} & set(r["verbs"]))


def test_agent_and_plugin_accounts_hold_only_their_own_role(default_objects: list[Manifest]) -> None:
    agent, plugin = (
        rules_of(default_objects, "tessera-agent"),
        rules_of(default_objects, "tessera-device-plugin"),
    )
    assert not allows(agent, ("", "nodes", "patch")) and not allows(agent, ("", "pods", "patch"))
    assert not allows(plugin, ("scheduling.tessera.dev", "gpunodereports", "update"))
    assert not allows(plugin, ("", "events", "create"))


def test_agent_and_plugin_roles_are_separate(default_objects: list[Manifest]) -> None:
    names = {r["metadata"]["name"]: r for r in find(default_objects, "ClusterRole")}
    assert all(allows(names["tessera-agent"]["rules"], n) for n in AGENT_NEEDS)
    assert all(allows(names["tessera-device-plugin"]["rules"], n) for n in DEVICE_PLUGIN_NEEDS)
    assert not allows(names["tessera-agent"]["rules"], ("", "nodes", "patch"))
    # No node writes anywhere (no bind lock): the scheduler and the device plugin only read or nothing.
    for component in ("tessera-scheduler", "tessera-device-plugin"):
        assert not allows(names[component]["rules"], ("", "nodes", "patch")), component
    assert not allows(names["tessera-device-plugin"]["rules"], ("", "nodes", "get"))
    assert not allows(
        names["tessera-device-plugin"]["rules"], ("scheduling.tessera.dev", "gpunodereports", "create")
    )


@pytest.mark.parametrize("template", ["rbac-scheduler.yaml", "rbac-node.yaml", "rbac-users.yaml"])
def test_every_rule_says_why(template: str) -> None:
    lines = (CHART / "templates" / template).read_text().splitlines()
    rule_starts = [i for i, line in enumerate(lines) if re.match(r"^\s+- apiGroups:", line)]
    assert rule_starts
    for i in rule_starts:
        assert lines[i - 1].strip().startswith("#"), f"{template}:{i + 1} rule has no comment saying why"


def test_people_can_read_reports_and_run_gangs_but_not_change_queues(default_objects: list[Manifest]) -> None:
    roles = {r["metadata"]["name"]: r for r in find(default_objects, "ClusterRole")}
    view, edit = roles["tessera-view"], roles["tessera-edit"]
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert "rbac.authorization.k8s.io/aggregate-to-view" not in edit["metadata"]["labels"]
    group = "scheduling.tessera.dev"
    assert allows(view["rules"], (group, "gpunodereports", "list"))
    assert allows(view["rules"], (group, "queues", "watch"))
    assert allows(edit["rules"], (group, "podgroups", "create"))
    for role in (view, edit):
        for verb in ("create", "update", "patch", "delete"):
            assert not allows(role["rules"], (group, "queues", verb))
            assert not allows(role["rules"], (group, "gpunodereports", verb))
        assert not allows(role["rules"], (group, "podgroups/status", "update"))
