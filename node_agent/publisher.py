"""Publish this node's `GPUNodeReport` custom object, only on change or when a heartbeat is due.

"Change" ignores the observation time and jitter in the figures that move every second (utilisation,
temperature, power, memory within a band): the scheduler and `kubectl` need the state, not the noise.
Structure (processes, pods, shares, health) always counts.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

from node_agent.oneline import first_line
from scheduler.api import GPUNodeReport
from scheduler.api.keys import GROUP, VERSION

log = logging.getLogger(__name__)

PLURAL = "gpunodereports"
# Bands inside which a moving figure counts as unchanged.
MEMORY_BAND_MIB = 64
UTIL_BAND_PCT = 5.0
TEMP_BAND_C = 3.0
POWER_BAND_W = 10.0


def _band(value: float | None, width: float) -> int | None:
    return None if value is None else round(value / width)


def fingerprint(report: GPUNodeReport) -> str:
    """A digest of what matters in a report; equal digests mean there is nothing new to publish."""
    # The summary is derived from the GPUs (banded below), so it carries no change of its own.
    spec = report.spec.model_dump(by_alias=True, exclude={"observed_at", "summary"})
    for gpu in spec["gpus"]:
        gpu["memoryUsedMiB"] = _band(gpu["memoryUsedMiB"], MEMORY_BAND_MIB)
        gpu["utilizationPct"] = _band(gpu["utilizationPct"], UTIL_BAND_PCT)
        gpu["temperatureC"] = _band(gpu["temperatureC"], TEMP_BAND_C)
        gpu["powerW"] = _band(gpu["powerW"], POWER_BAND_W)
        for proc in gpu["processes"]:
            proc["usedMiB"] = _band(proc["usedMiB"], MEMORY_BAND_MIB)
        for share in gpu["shares"]:
            share["memoryUsedMiB"] = _band(share["memoryUsedMiB"], MEMORY_BAND_MIB)
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


class ReportPublisher:
    """Creates or replaces the cluster-scoped `gpunodereports/<node>` through CustomObjectsApi."""

    def __init__(
        self,
        custom_api: Any,
        *,
        heartbeat_s: float = 60.0,
        min_interval_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = custom_api
        self._heartbeat = heartbeat_s
        self._min_interval = min_interval_s
        self._clock = clock
        self._last_digest: str | None = None
        self._last_write: float | None = None
        self._resource_version: str | None = None
        self._failing = False
        self.writes = 0

    def due(self, report: GPUNodeReport) -> bool:
        if self._last_write is None:
            return True
        since = self._clock() - self._last_write
        if since >= self._heartbeat:
            return True
        return since >= self._min_interval and fingerprint(report) != self._last_digest

    def publish(self, report: GPUNodeReport, *, force: bool = False) -> bool:
        """Write the report if it changed or a heartbeat is due; True when it was written."""
        if not force and not self.due(report):
            return False
        try:
            self._write(report)
        except Exception as exc:  # the API may be down: keep the agent going, retry next round
            if not self._failing:
                log.warning("cannot publish GPUNodeReport %s: %s", report.metadata.name, first_line(exc))
            self._failing = True
            return False
        if self._failing:
            log.info("publishing GPUNodeReport %s again", report.metadata.name)
        self._failing = False
        self._last_digest = fingerprint(report)
        self._last_write = self._clock()
        self.writes += 1
        return True

    def _write(self, report: GPUNodeReport) -> None:
        from kubernetes.client.exceptions import ApiException

        name = report.metadata.name
        body = report.model_dump(by_alias=True, exclude_none=True, mode="json")
        for attempt in range(2):
            if self._resource_version is None:
                try:
                    current = self._api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
                    self._resource_version = current["metadata"]["resourceVersion"]
                except ApiException as exc:
                    if exc.status != 404:
                        raise
                    # A create must not carry the resourceVersion of a replace tried before (the real
                    # API server answers 500 "resourceVersion should not be set on objects to be created").
                    body["metadata"].pop("resourceVersion", None)
                    created = self._api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
                    self._resource_version = created["metadata"].get("resourceVersion")
                    return
            body["metadata"]["resourceVersion"] = self._resource_version
            try:
                replaced = self._api.replace_cluster_custom_object(GROUP, VERSION, PLURAL, name, body)
            except ApiException as exc:
                # 409: someone else wrote it; 404: it was deleted. Re-read and try once more.
                self._resource_version = None
                if exc.status in (404, 409) and attempt == 0:
                    continue
                raise
            self._resource_version = replaced["metadata"].get("resourceVersion")
            return
