"""Find every command the documentation shows, and decide how the test checks it.

Where commands are: ```bash (or sh, shell, console) blocks of README.md, docs/*.md and the READMEs under
examples/, deploy/, node_agent/, device_plugin/ and scheduler/; inline code that starts with `tessera `,
`kubectl tessera ` or `python -m scheduler`; and comment lines of examples/**/*.yaml that show a command
(`# Run: tessera ...`, `#   tessera ...`). Plain ``` blocks are synopses (`[--repeat N]`, `<name>`), not
commands.

A marker in an HTML comment just before a block applies to every command in it (it is invisible on the
rendered page):

    <!-- doc-test: slow -->            run only with TESSERA_DOCS_SLOW=1; otherwise its options are parsed
    <!-- doc-test: server -->          a long-running process: started, must still be up after a few seconds
    <!-- doc-test: cluster -->         needs a Kubernetes cluster: options parsed (tessera's), else listed
    <!-- doc-test: output "a" "b" -->  the output must contain each string (whitespace-insensitive)

Without a marker the kind follows from the program: kubectl, helm and docker need a cluster (or an
image registry); `pip install` / `python3 -m venv` are setup (the rest of the line still runs);
`tessera nodes` without `--from-file`, `doctor`, `why`, `kubectl tessera` and `tessera-scheduler` need a
cluster; `tessera bench` and `tessera replay` (but `--list-policies`) are slow; a device plugin on fake
GPUs is a server; every other `tessera ...`, `python scripts/...`, `tessera-agent --once` runs. Inline
code counts only when it has an option and elides nothing (`tessera bench` alone is a name).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[2]
Kind = Literal["run", "slow", "server", "cluster", "setup", "ci"]

DOC_FILES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "examples").rglob("*.md")),
    ROOT / "deploy" / "helm" / "tessera" / "README.md",
    ROOT / "node_agent" / "README.md",
    ROOT / "device_plugin" / "README.md",
    ROOT / "scheduler" / "replay" / "README.md",
]
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"<!--\s*doc-test:\s*(\w+)(.*?)-->")
_INLINE = re.compile(r"`((?:tessera|kubectl tessera|python -m scheduler\S*) [^`]+)`")
_YAML_CMD = re.compile(r"^#\s+(?:Run:\s*)?((?:tessera|kubectl|python -m scheduler\S*)\s.+)$")
SHELLS = ("bash", "sh", "shell", "console")
CLUSTER_PROGRAMS = ("kubectl", "helm", "docker")


@dataclass
class Command:
    text: str  # as written (continuations joined, comments dropped)
    where: str  # file:line
    kind: Kind
    outputs: list[str] = field(default_factory=list)

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)


def _strip_comment(line: str) -> str:
    """`cmd  # comment` -> `cmd`, respecting quotes (a '#' inside quotes stays)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        return line.strip()
    if not tokens:
        return ""
    # Keep the original spelling up to the comment: find where the comment starts outside quotes.
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def classify(text: str, marker: str | None) -> Kind:
    if marker in ("slow", "server", "cluster"):
        return marker  # type: ignore[return-value]
    words = shlex.split(text)
    first = words[0] if words else ""
    if "pip install" in text or "-m venv" in text:
        return "setup"
    if text.startswith("bash .ci/run") or ".venv/bin/ruff" in text:
        return "ci"
    if first in CLUSTER_PROGRAMS:
        return "cluster"
    if first == "tessera-scheduler":
        return "cluster"
    if first == "tessera" and len(words) > 1:
        sub = words[1]
        if sub in ("doctor", "why", "sandbox") or (sub == "nodes" and "--from-file" not in words):
            return "cluster"  # `sandbox` starts a control plane that outlives the command
    if first == "tessera" and len(words) > 1 and words[1] == "bench":
        return "slow"  # a benchmark: minutes on a busy 2-core machine
    if first == "tessera" and len(words) > 1 and words[1] == "replay" and "--list-policies" not in words:
        return "slow"  # and it needs the openb trace (../shared/traces)
    if (
        first == "tessera-agent"
        and "--once" not in words
        and "bench" not in words
        and "--no-cluster" not in words
    ):
        return "cluster"
    if first == "tessera-agent" and "--no-cluster" in words and "--listen" in words:
        return "server"
    if first == "tessera-device-plugin" and "bench" not in words:
        return "server" if "--fake-gpus" in words else "cluster"
    return "run"


def _markdown(path: Path) -> list[Command]:
    out: list[Command] = []
    rel = path.relative_to(ROOT)
    lines = path.read_text().splitlines()
    marker: tuple[str, list[str]] | None = None
    lang: str | None = None
    pending = ""
    start = 0
    for no, line in enumerate(lines, start=1):
        fence = _FENCE.match(line.strip())
        if fence and lang is None:
            lang = fence.group(1)
            continue
        if fence and lang is not None:
            lang = None
            marker = None
            continue
        if lang is None:
            m = _MARKER.search(line)
            if m:
                marker = (m.group(1), re.findall(r'"([^"]*)"', m.group(2)))
            elif line.strip():
                for cmd in _INLINE.findall(line):
                    cmd = cmd.strip()
                    # Inline code names a command in prose (`tessera bench` measures...); one with an
                    # option is a command to type, unless it elides (`tessera replay ... --report x`).
                    if re.search(r"\s-", cmd) and "..." not in cmd:
                        out.append(Command(cmd, f"{rel}:{no}", classify(cmd, None)))
                marker = None if not line.strip().startswith("<!--") else marker
            continue
        if lang not in SHELLS:
            continue
        text = _strip_comment(line)
        if not pending:
            start = no
        if text.endswith("\\"):
            pending += text[:-1].rstrip() + " "
            continue
        text = (pending + text).strip()
        pending = ""
        if not text:
            continue
        kind_marker = marker[0] if marker and marker[0] != "output" else None
        outputs = marker[1] if marker and marker[0] == "output" else []
        out.append(Command(text, f"{rel}:{start}", classify(text, kind_marker), outputs))
    return out


def _yaml(path: Path) -> list[Command]:
    out = []
    rel = path.relative_to(ROOT)
    for no, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.startswith("#"):
            break  # commands are in the header comment
        m = _YAML_CMD.match(line)
        if m:
            text = _strip_comment(m.group(1))
            out.append(Command(text, f"{rel}:{no}", classify(text, None)))
    return out


def documented_commands() -> list[Command]:
    commands = [c for path in DOC_FILES if path.is_file() for c in _markdown(path)]
    commands += [c for path in sorted((ROOT / "examples").rglob("*.yaml")) for c in _yaml(path)]
    return commands
