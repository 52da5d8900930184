"""Reading owners from the API server for the walk and the rules.

Pods (an LWS leader, a Spark driver) come from the scheduler's own pod cache. The kinds the podgrouper
knows (`kinds.py`) are watched: an informer per resource, started the first time a pod's owner is of that
kind (so only kinds that exist in the cluster are watched, with exactly the RBAC the chart grants), whose
events also tell the reconciler that a workload changed (scaled, edited, its status moved). Until an
informer has synced, and for kinds not listed, an owner is read with a GET. Every answer is checked
against the reference's UID (`walk.py`); a cached copy with another UID is re-read before being called
gone, since the cache may not have seen a re-creation yet.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.kube.backoff import Backoff
from scheduler.kube.event_queue import ResourceEvent
from scheduler.kube.informer import Informer, WatchTarget, slim
from scheduler.kube.podgrouper import kinds
from scheduler.kube.podgrouper.model import Obj, OwnerRef, meta, spec, status, uid_of
from scheduler.kube.podgrouper.walk import Found

log = logging.getLogger(__name__)

GVR = tuple[str, str, str]  # (group, version, plural)


def _problem(exc: ApiException, kind: str, name: str, plural: str, group: str) -> str:
    if exc.status == 403:
        return f"forbidden: the scheduler may not read {plural}.{group or 'core'}"
    if exc.status == 404:
        return f"{kind} {name} not found (deleted)"
    return f"API error {exc.status} {exc.reason}"


class OwnerReader:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        pods: Callable[[str], Obj | None] | None = None,
        on_change: Callable[[Obj], None] | None = None,
        watch: bool = True,
        backoff: Callable[[], Backoff] = Backoff,
        watch_timeout_s: int = 300,
    ) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.pods = pods
        self.on_change = on_change
        self.watch = watch
        self.backoff = backoff
        self.watch_timeout_s = watch_timeout_s
        self.gets = 0  # reads that went to the API server (for tests and logs)
        self._informers: dict[GVR, Informer] = {}
        self._lock = threading.Lock()

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def stop(self) -> None:
        with self._lock:
            informers = list(self._informers.values())
            self._informers.clear()
        for informer in informers:
            informer.stop()

    def watched(self) -> list[GVR]:
        with self._lock:
            return sorted(self._informers)

    # ---- reads -------------------------------------------------------------------------------------------
    def __call__(self, namespace: str, ref: Mapping[str, Any]) -> Found:
        """The owner a reference names, checked against its UID."""
        api_version, kind = str(ref.get("apiVersion") or ""), str(ref.get("kind") or "")
        name, uid = str(ref.get("name") or ""), str(ref.get("uid") or "")
        found = self._read(namespace, api_version, kind, name, cached=True)
        if found.obj is not None and uid and uid_of(found.obj) != uid:
            found = self._read(namespace, api_version, kind, name, cached=False)
            if found.obj is not None and uid_of(found.obj) != uid:
                return Found(
                    None, f"{kind} {name} was deleted and re-created (UID {uid_of(found.obj)}, not {uid})"
                )
        return found

    def alive(self, namespace: str, owner: OwnerRef) -> bool | None:
        """Whether `owner` exists now with its UID and is not being deleted, read from the API server (a
        cache may not have seen the deletion yet); None when that cannot be told (not allowed, an error)."""
        found = self._read(namespace, owner.api_version, owner.kind, owner.name, cached=False)
        if found.obj is None:
            return False if found.problem.endswith("not found (deleted)") else None
        return uid_of(found.obj) == owner.uid and not meta(found.obj).get("deletionTimestamp")

    def read(self, namespace: str, api_version: str, kind: str, name: str) -> Obj | None:
        """An object by name (no owner reference to check it against): for rules that need one more."""
        return self._read(namespace, api_version, kind, name, cached=True).obj

    def _read(self, namespace: str, api_version: str, kind: str, name: str, *, cached: bool) -> Found:
        group, version = api_version.split("/", 1) if "/" in api_version else ("", api_version)
        known = kinds.lookup(group, kind)
        plural = known.plural if known else kind.lower() + "s"
        if cached:
            hit = self._cached(namespace, group, version, kind, plural, name, known is not None)
            if hit is not None:
                return Found(hit)
        resp: Any
        try:
            self.gets += 1
            if group == "" and kind == "Pod":
                resp = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
            elif group == "" and kind == "ReplicationController":
                resp = self.core.read_namespaced_replication_controller(
                    name, namespace, _preload_content=False
                )
            elif group == "":
                return Found(None, f"{kind} {name}: not a core kind the podgrouper reads")
            else:
                resp = self.custom.get_namespaced_custom_object(
                    group, version, namespace, plural, name, _preload_content=False
                )
            data = json.loads(resp.data)
        except ApiException as exc:
            return Found(None, _problem(exc, kind, name, plural, group))
        except (ValueError, OSError) as exc:
            return Found(None, f"could not read {kind} {name}: {exc}")
        if not isinstance(data, dict):
            return Found(None, f"{kind} {name}: unexpected answer")
        data.setdefault("apiVersion", api_version)
        data.setdefault("kind", kind)
        return Found(data)

    def _cached(
        self, namespace: str, group: str, version: str, kind: str, plural: str, name: str, known: bool
    ) -> Obj | None:
        key = f"{namespace}/{name}"
        if group == "" and kind == "Pod":
            return self.pods(key) if self.pods is not None else None
        if not (known and group and self.watch):
            return None
        informer = self._informer((group, version, plural), kind)
        if not informer.synced.is_set():
            return None
        obj = informer.get(key)
        if obj is None:
            return None
        return {**obj, "apiVersion": f"{group}/{version}", "kind": kind}

    def _informer(self, gvr: GVR, kind: str) -> Informer:
        with self._lock:
            informer = self._informers.get(gvr)
            if informer is None:
                group, version, plural = gvr
                target = WatchTarget(
                    f"{plural}.{group}",
                    self.custom.list_cluster_custom_object,
                    (group, version, plural),
                    transform=slim,
                )
                informer = Informer(
                    target,
                    lambda event: self._changed(event, group, kind),
                    backoff=self.backoff(),
                    watch_timeout_s=self.watch_timeout_s,
                )
                self._informers[gvr] = informer
                informer.start()
                log.info("podgrouper: watching %s.%s/%s", plural, group, version)
        return informer

    def _changed(self, event: ResourceEvent, group: str, kind: str) -> None:
        if self.on_change is not None and matters(event, (group, kind) in kinds.READS_STATUS):
            self.on_change(event.obj)


def matters(event: ResourceEvent, reads_status: bool) -> bool:
    """Whether an owner's watch event can change a group. Not a deletion (its pods go with it) nor a change
    of status alone where the rule does not read status: a ReplicaSet's status moves with every pod's
    readiness, and would decide again every per-pod group of its Deployment each time."""
    if event.type == "DELETED":
        return False
    if event.type == "ADDED" or event.old is None:
        return True
    old, new = meta(event.old), meta(event.obj)
    if old.get("generation") != new.get("generation") or any(
        old.get(k) != new.get(k) for k in ("labels", "annotations", "ownerReferences", "uid")
    ):
        return True
    if old.get("generation") is None and spec(event.old) != spec(event.obj):
        return True  # a kind that does not count generations
    return reads_status and status(event.old) != status(event.obj)
