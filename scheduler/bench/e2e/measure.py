"""What the benchmark reads to judge a run: CPU time and memory of processes (/proc), and the API server's
own count of the requests it served (`apiserver_request_total`, from its /metrics)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path
from typing import Any

from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

CLK_TCK = os.sysconf("SC_CLK_TCK")
Requests = Counter[str]  # "VERB resource[/subresource]" -> requests


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds of the process so far (None when it is not there)."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14 and 15)


def memory_mib(pid: int | None) -> dict[str, float] | None:
    """Resident memory now (VmRSS) and at its peak (VmHWM), MiB."""
    if pid is None:
        return None
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    out: dict[str, float] = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out["rss" if key == "VmRSS" else "peak_rss"] = round(int(value.split()[0]) / 1024, 1)
    return out


def api_requests(api: client.ApiClient) -> Requests:
    """The API server's request counters, by verb and resource (codes and scopes summed)."""
    conf: Any = api.configuration
    headers = {"Accept": "text/plain"}
    token = conf.get_api_key_with_prefix("BearerToken", alias="authorization")  # (certificates need none)
    if token:
        headers["Authorization"] = token
    resp = api.call_api("GET", f"{conf.host}/metrics", header_params=headers)
    text = resp.read().decode()
    out: Requests = Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":  # the parser strips the counter's _total
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource = f"{resource}/{labels['subresource']}"
            out[f"{labels.get('verb', '?')} {resource or labels.get('path', '?')}"] += int(sample.value)
    return out


def difference(after: Requests, before: Requests) -> Requests:
    return Counter({k: after[k] - before.get(k, 0) for k in after if after[k] - before.get(k, 0) > 0})
