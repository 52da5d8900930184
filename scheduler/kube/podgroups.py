"""Creating the PodGroups the podgrouper derives (once each; an existing group is left to its owner)."""

from __future__ import annotations

import logging
import threading
from typing import Literal

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.keys import GROUP, VERSION
from scheduler.kube.binder import api_reason
from scheduler.kube.podgrouper import GroupSpec

log = logging.getLogger(__name__)

Outcome = Literal["created", "exists", "failed"]


class PodGroupEnsurer:
    def __init__(self, custom: client.CustomObjectsApi) -> None:
        self.custom = custom
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def ensure(self, group: GroupSpec) -> Outcome:
        """Create the group's PodGroup unless it exists."""
        key = f"{group.namespace}/{group.name}"
        with self._lock:
            if key in self._known:
                return "exists"
        if group.explicit:
            return "failed"  # user-named: created by the user, never by us
        try:
            self.custom.create_namespaced_custom_object(
                GROUP, VERSION, group.namespace, "podgroups", group.to_podgroup(), _preload_content=False
            )
        except ApiException as exc:
            if exc.status != 409:
                log.warning("could not create PodGroup %s: %s", key, api_reason(exc))
                return "failed"
            with self._lock:
                self._known.add(key)
            return "exists"
        with self._lock:
            self._known.add(key)
        return "created"

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._known.discard(f"{namespace}/{name}")
