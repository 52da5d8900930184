"""What the docs show agrees with the code: the install guide's YAML is the example file, and the queue
page documents every field of the Queue model."""

from __future__ import annotations

import re

import yaml

from scheduler.api.queue import Queue
from tests.docs.doc_commands import ROOT


def yaml_blocks(markdown: str) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", markdown, flags=re.S)


def test_the_install_guides_pod_is_the_example_file() -> None:
    guide = (ROOT / "docs" / "install.md").read_text()
    example = yaml.safe_load((ROOT / "examples" / "install" / "fractional-pod.yaml").read_text())
    shown = [yaml.safe_load(b) for b in yaml_blocks(guide)]
    assert example in shown, "docs/install.md step 5 must show examples/install/fractional-pod.yaml as it is"


def _aliases(schema: dict, defs: dict, prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, sub in (schema.get("properties") or {}).items():
        out.add(name)
        ref = sub.get("$ref") or next((a.get("$ref") for a in sub.get("anyOf", []) if "$ref" in a), None)
        if ref:
            out |= _aliases(defs[ref.rsplit("/", 1)[-1]], defs)
    return out


def test_the_queue_page_documents_every_field() -> None:
    page = (ROOT / "docs" / "queues.md").read_text()
    schema = Queue.model_json_schema(by_alias=True)
    fields = _aliases(schema, schema["$defs"]) - {
        "apiVersion",
        "kind",
        "metadata",
        "spec",
        "status",
        "resources",
    }
    fields -= {"name", "namespace", "labels", "annotations", "uid", "resourceVersion"}
    in_code = {t for span in re.findall(r"`([^`]+)`", page) for t in re.split(r"[.{},\s]+", span) if t}
    missing = sorted(fields - in_code)
    assert not missing, f"docs/queues.md does not document {missing}"


def test_every_example_is_run_by_a_documented_command() -> None:
    """Each file of examples/ is loaded by a command the docs test runs (directly or by its folder)."""
    from tests.docs.doc_commands import documented_commands

    runs = [c.text for c in documented_commands() if c.kind in ("run", "setup")]
    for path in sorted((ROOT / "examples").rglob("*.yaml")):
        rel = str(path.relative_to(ROOT))
        folder = str(path.parent.relative_to(ROOT)) + "/"
        assert any(rel in r or f" {folder}" in r + " " for r in runs), f"no documented command runs {rel}"


def test_install_pages_name_every_crd_the_chart_installs() -> None:
    kinds = sorted(
        str(d["spec"]["names"]["kind"])
        for path in (ROOT / "deploy" / "helm" / "tessera" / "crds").glob("*.yaml")
        for d in yaml.safe_load_all(path.read_text())
        if d
    )
    assert kinds == ["GPUNodeReport", "PodGroup", "Queue", "Topology"]
    for page in (ROOT / "docs" / "install.md", ROOT / "deploy" / "helm" / "tessera" / "README.md"):
        first = next(line for line in page.read_text().splitlines() if "CRDs" in line)
        assert all(f"`{k}`" in first for k in kinds), f"{page.relative_to(ROOT)}: {first}"


def test_examples_use_the_tessera_command() -> None:
    for page in sorted((ROOT / "examples").rglob("*.md")):
        assert "python -m scheduler" not in page.read_text(), f"{page.relative_to(ROOT)}: write `tessera ...`"
