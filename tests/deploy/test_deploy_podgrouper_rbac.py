"""The scheduler's podgrouper RBAC is generated from the kinds the podgrouper knows: read-only, exactly those."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scheduler.kube.podgrouper.kinds import KINDS, markdown_table
from tests.deploy.deploy_support import MANIFESTS, Manifest, load_yaml_docs
from tests.deploy.test_deploy_rbac import allows, rules_of

DOC = Path(__file__).resolve().parents[2] / "docs" / "podgrouper.md"
SCHEDULER = "tessera-scheduler"


def _owner_rules(objects: list[Manifest]) -> list[dict[str, Any]]:
    return [
        r
        for r in rules_of(objects, SCHEDULER)
        if r["verbs"] == ["get", "list", "watch"] and not set(r["apiGroups"]) & {"scheduling.tessera.dev"}
    ]


def test_every_known_kind_is_readable_and_watchable(default_objects: list[Manifest]) -> None:
    rules = rules_of(default_objects, SCHEDULER)
    for kind in KINDS:
        for verb in ("get", "list", "watch"):
            assert allows(rules, (kind.group, kind.plural, verb)), f"{kind.kind}: {verb} {kind.plural}"


def test_owner_rules_are_read_only_and_name_exactly_the_known_kinds(default_objects: list[Manifest]) -> None:
    rules = _owner_rules(default_objects)
    granted = {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]}
    known = {(k.group, k.plural) for k in KINDS}
    assert known <= granted
    assert granted - known <= {("", "nodes"), ("", "pods")}  # the scheduler's own caches, granted apart
    rules = rules_of(default_objects, SCHEDULER)
    for kind in KINDS:
        if (kind.group, kind.plural) in {("", "pods")}:
            continue  # the scheduler patches pods and binds them: granted by its own rules
        for verb in ("create", "update", "patch", "delete"):
            assert not allows(rules, (kind.group, kind.plural, verb)), f"{verb} {kind.plural}.{kind.group}"


def test_plain_manifests_carry_the_same_rules() -> None:
    objects = load_yaml_docs(MANIFESTS / "tessera.yaml")
    rules = rules_of(objects, SCHEDULER)
    assert all(allows(rules, (k.group, k.plural, "watch")) for k in KINDS)


def test_docs_table_lists_every_kind_with_its_rule_and_kais() -> None:
    assert markdown_table() in DOC.read_text(), "docs/podgrouper.md: paste kinds.markdown_table()"
