"""The Kubernetes adapter: the `Cluster` interface of the scheduling loop over a real API server.

`KubeCluster` composes the parts, each in the module named after it, and wires them together:
- informers (`informer.py`) keep watch caches of Pods, Nodes, Queues, PodGroups, GPUNodeReports, Topologies,
  PriorityClasses, Namespaces, PersistentVolumes, PersistentVolumeClaims and StorageClasses (and KAI
  Scheduler's kinds, `kai_compat.py`) and feed a queue (`event_queue.py`);

- `drain_events` hands the cycle what the queue holds, as the watch translation (`translate.py`) says the
  cycle should see it, with the PodGroups the podgrouper (`podgrouper/`) wrote ahead of everything else;
- binds are asynchronous (`bind_pool.py`): `bind` returns at once, `bind_outcomes` tells the next cycle;
  the request of one bind (a Binding carrying the assignment) is `binder.py`'s;
- evictions go through the Eviction API, deleting where a budget refuses when told to (`evictor.py`);
  pending reasons, Queue and PodGroup status are written back only where they differ (`status.py`);
  warnings become Events on their objects (`recorder.py`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

from kubernetes import client

from scheduler.api.assignment import GPUAssignment
from scheduler.api.keys import GROUP, POD_RECORD_LABEL, SCHEDULER_NAME, VERSION
from scheduler.api.podgroup import PodGroupStatus
from scheduler.api.priority import PRIORITY_CLASSES
from scheduler.api.queue import QueueStatus
from scheduler.cache.cluster import BindOutcome, BindResult, EvictError, WatchEvent
from scheduler.kube.backoff import Backoff
from scheduler.kube.bind_pool import AsyncBinds
from scheduler.kube.binder import Binder
from scheduler.kube.event_queue import EventQueue, ResourceEvent
from scheduler.kube.evictor import Evictor
from scheduler.kube.informer import Informer, WatchTarget, slim
from scheduler.kube.kai_compat import KaiCompat
from scheduler.kube.pod_decoder import pod_watch
from scheduler.kube.podgrouper.book import GroupBook
from scheduler.kube.podgrouper.owners import OwnerReader
from scheduler.kube.podgrouper.reconciler import PodGroupReconciler
from scheduler.kube.recorder import EventRecorder
from scheduler.kube.status import PendingPodReporter, StatusPublisher
from scheduler.kube.translate import WatchTranslator, newly_allocated, wakes_cycle
from scheduler.kube.volume_prebind import VolumePrebind
from scheduler.model.reasons import Reason
from scheduler.model.types import PodInfo


class KubeCluster:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        identity: str = "tessera-scheduler",
        scheduler_name: str = SCHEDULER_NAME,
        event_interval_s: float = 30.0,
        watch_timeout_s: int = 300,
        backoff: Backoff | None = None,
        podgrouper: bool = True,
        bind_workers: int = 8,
        kai_compat: bool = False,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        sched = client.SchedulingV1Api(api_client)
        self.scheduler_name = scheduler_name
        self.podgrouper = podgrouper
        self.events = EventQueue()
        self.recorder = EventRecorder(self.core, instance=identity, min_interval_s=event_interval_s)
        # Every cache keeps its objects slimmed (`informer.slim`): no managedFields, strings shared.
        targets = [
            WatchTarget("Node", self.core.list_node, transform=slim),
            pod_watch(self.core.list_pod_for_all_namespaces),
            WatchTarget(
                "Queue", self.custom.list_cluster_custom_object, (GROUP, VERSION, "queues"), transform=slim
            ),
            WatchTarget(
                "PodGroup",
                self.custom.list_cluster_custom_object,
                (GROUP, VERSION, "podgroups"),
                label_selector=f"!{POD_RECORD_LABEL}",  # bare pods' records: the cycle never needs them
                transform=slim,
            ),
            WatchTarget(
                "GPUNodeReport",
                self.custom.list_cluster_custom_object,
                (GROUP, VERSION, "gpunodereports"),
                transform=slim,
            ),
            WatchTarget(
                "Topology",
                self.custom.list_cluster_custom_object,
                (GROUP, VERSION, "topologies"),
                optional=True,
                transform=slim,
            ),
            WatchTarget("PriorityClass", sched.list_priority_class, transform=slim),
            # Namespace labels (affinity terms' namespace selectors) and the volumes pods mount
            # (kube-scheduler's VolumeBinding and VolumeZone: scheduler/cache/volumes.py).
            WatchTarget("Namespace", self.core.list_namespace, transform=slim),
            WatchTarget("PersistentVolume", self.core.list_persistent_volume, transform=slim),
            WatchTarget(
                "PersistentVolumeClaim",
                self.core.list_persistent_volume_claim_for_all_namespaces,
                transform=slim,
            ),
            WatchTarget("StorageClass", client.StorageV1Api(api_client).list_storage_class, transform=slim),
        ]
        # KAI Scheduler's Queue and PodGroup kinds, translated to Tessera's (docs/kai-compat.md).
        self.kai = KaiCompat(self.custom, self.recorder) if kai_compat else None
        targets += self.kai.targets() if self.kai is not None else []
        self.informers = {
            t.kind: Informer(t, self._received, backoff=backoff or Backoff(), watch_timeout_s=watch_timeout_s)
            for t in targets
        }
        if self.kai is not None:
            self.kai.attach(self.informers)
        self.owners = OwnerReader(
            api_client,
            pods=self.informers["Pod"].get,
            on_change=lambda obj: self.podgroups.owner_changed(obj),
            watch_timeout_s=watch_timeout_s,
        )
        book = GroupBook(
            self.owners,
            reader=self.owners.read,
            priority_class_exists=lambda name: (
                name in PRIORITY_CLASSES or self.informers["PriorityClass"].get(name) is not None
            ),
        )
        self.podgroups = PodGroupReconciler(
            self.custom, book, self.informers["PodGroup"].get, owner_alive=self.owners.alive
        )
        # A standby replica keeps its cache warm but writes nothing: PodGroups it derives are written once it
        # leads (`writable`), and announced ahead of everything else.
        self.writable = True
        # Set when something arrived that a cycle should act on soon (see `wait_for_work`).
        self._work = threading.Event()
        self._marked = threading.Event()  # the device plugin marked a pod allocated (see `wait_for_mark`)
        self.binder = Binder(self.core)
        self.binds = AsyncBinds(
            self.binder,
            wake=self._work.set,
            workers=bind_workers,
            prebind=VolumePrebind(
                self.core,
                claims=self.informers["PersistentVolumeClaim"].get,
                classes=self.informers["StorageClass"].get,
                volumes=self.informers["PersistentVolume"].snapshot,
                node=self.informers["Node"].get,
            ),
        )
        self.evictor = Evictor(self.core, self.recorder)
        # Status writers compare with the objects' current status in the watch caches.
        self.pending = PendingPodReporter(self.core, self.recorder, self.informers["Pod"].get)
        self.status = StatusPublisher(
            self.custom, self.informers["Queue"], self.informers["PodGroup"], self.kai
        )
        self.translator = WatchTranslator(
            scheduler_name=scheduler_name,
            pending=self.pending,
            recorder=self.recorder,
            podgroups=self.podgroups if podgrouper else None,
            kai=self.kai,
        )

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def start(self) -> KubeCluster:
        for informer in self.informers.values():
            informer.start()
        return self

    def wait_synced(self, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        return all(i.synced.wait(max(0.0, deadline - time.monotonic())) for i in self.informers.values())

    def stop(self) -> None:
        self.binds.stop()
        for informer in self.informers.values():
            informer.stop()
        self.owners.stop()
        self.podgroups.stop()

    def replay(self) -> None:
        """Queue every cached object as ADDED (nodes first), for a scheduler rebuilt from scratch. Events
        still queued are dropped: the caches already contain them."""
        self.events.drain()
        self.translator.reset()
        kai_kinds = self.kai.kinds if self.kai is not None else ()
        for kind in (
            "Node",
            "PriorityClass",
            "Queue",
            "PodGroup",
            *kai_kinds,
            "GPUNodeReport",
            "Topology",
            "Namespace",
            "StorageClass",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "Pod",
        ):
            for obj in self.informers[kind].snapshot():
                self.events.put(ResourceEvent(kind, "ADDED", obj))

    # ---- waking the loop ---------------------------------------------------------------------------------
    def _received(self, ev: ResourceEvent) -> None:
        """An informer's event (on its thread)."""
        self.events.put(ev)
        if wakes_cycle(ev, self.scheduler_name):
            self._work.set()
            if newly_allocated(ev):
                self._marked.set()

    def wake(self) -> None:
        """End a `wait_for_work` or `wait_for_mark` now (the loop is stopping)."""
        self._work.set()
        self._marked.set()

    def wait_for_mark(self, timeout_s: float) -> bool:
        """Block until the device plugin marked a pod allocated (since the last call) or `timeout_s` passed;
        whether it did."""
        marked = self._marked.wait(timeout_s)
        self._marked.clear()
        return marked

    def wait_for_work(self, timeout_s: float) -> bool:
        """Block until something a cycle should act on arrived (a pending pod of ours, a bind outcome...) or
        `timeout_s` passed; whether there is work."""
        woke = self._work.wait(timeout_s)
        self._work.clear()
        return woke

    # ---- the Cluster interface ---------------------------------------------------------------------------
    def now(self) -> float:
        return time.time()

    def epoch_s(self) -> float:
        return time.time()

    def drain_events(self) -> list[WatchEvent]:
        out = self.translator.translate(self.events.drain())
        if self.podgrouper and self.writable:
            # Every group that changed in this drain is decided once and written, and handed to the cycle
            # ahead of everything else, so no gang is seen without its minMember.
            out[:0] = self.translator.written_podgroups()
        if self.kai is not None and self.writable:
            self.kai.flush_warnings()
        return out

    def bind(self, pod: PodInfo, assignment: GPUAssignment) -> BindResult:
        return self.binds.bind(pod, assignment)

    def bind_outcomes(self) -> list[BindOutcome]:
        return self.binds.outcomes()

    def evict(
        self, pod: PodInfo, *, action: str, message: str, grace_s: float | None = None, force: bool = False
    ) -> None:
        result = self.evictor.evict(
            pod.namespace, pod.name, pod.uid, action, message, grace_s=grace_s, force=force
        )
        if not result.ok:
            raise EvictError(result.reason)

    def report_pending(self, pod: PodInfo, reason: Reason, message: str) -> None:
        self.pending.unschedulable(pod.namespace, pod.name, pod.uid, message, reason=reason)

    def publish_status(self, queues: Mapping[str, QueueStatus], groups: Mapping[str, PodGroupStatus]) -> None:
        self.status.publish(queues, groups)

    def warn(self, kind: str, namespace: str | None, name: str, reason: str, message: str) -> None:
        key = f"{namespace}/{name}" if namespace else name
        obj = self.informers[kind].get(key) if kind in self.informers else None
        if obj is None and self.kai is not None:
            obj = self.kai.find(kind, key)
        self.recorder.warn(obj, kind, namespace, name, reason, message)
