"""Why a pod is pending: one `Reason` per case, each with the kind of wait it is.

The value is the CamelCase code users see (pod condition reason, event reason, dashboard); the kind is
what the scheduler acts on: the actions that make room (consolidate, reclaim) take only pods that wait
for room, preempt also those held back by their own queue's limit or quota, and nothing else is tried for
the rest. Adding a reason means choosing its kind here, nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Wait(StrEnum):
    ROOM = "room"  # nothing free fits it now; moving or evicting pods may make room
    QUEUE_RULE = "queue-rule"  # its queue's limit or quota holds it back; preempting in the queue may help
    IDLE = "idle"  # only capacity freed by finishing pods helps (no queue is over its share to reclaim from)
    GANG = "gang"  # waits for members of its gang
    INVALID = "invalid"  # the pod or its queue must be fixed by a person
    BIND = "bind"  # placed, but the bind failed; retried next cycle
    RELEASING = "releasing"  # placed where evicted pods still terminate: bound once they are gone
    NEXT_CYCLE = "next-cycle"  # arrived after the last cycle: not considered yet
    DEVICE_PLUGIN = (
        "device-plugin"  # fits where the device plugin has yet to allocate the pod bound before it
    )
    GATED = "gated"  # its scheduling gates are still on: the controller that set them removes them


class Reason(StrEnum):
    UNSCHEDULABLE = "Unschedulable"
    GANG_UNSCHEDULABLE = "GangUnschedulable"
    TOPOLOGY_UNSATISFIED = "TopologyUnsatisfied"
    FRAGMENTED = "Fragmented"
    QUEUE_AT_FAIR_SHARE = "QueueAtFairShare"
    WAITING_FOR_RECLAIM = "WaitingForReclaim"
    RECLAIM_BLOCKED = "ReclaimBlocked"
    WAITING_FOR_MIN_RUNTIME = "WaitingForMinRuntime"
    WAITING_FOR_CAPACITY = "WaitingForCapacity"
    OVER_LIMIT = "OverLimit"
    OVER_QUOTA = "OverQuota"
    GANG_INCOMPLETE = "GangIncomplete"
    GANG_BELOW_MIN_MEMBER = "GangBelowMinMember"
    INVALID_REQUEST = "InvalidRequest"
    INVALID_QUEUE = "InvalidQueue"
    INVALID_TOPOLOGY = "InvalidTopology"
    BIND_FAILED = "BindFailed"
    PIPELINED = "Pipelined"
    RESERVATION_DROPPED = "ReservationDropped"
    WAITING = "Waiting"
    WAITING_FOR_DEVICE_PLUGIN = "WaitingForDevicePlugin"
    SCHEDULING_GATED = "SchedulingGated"

    @property
    def wait(self) -> Wait:
        return _WAIT[self]

    @property
    def meaning(self) -> str:
        """What the reason means, in a few words, for people (dashboard legends)."""
        return _MEANING[self]


_WAIT = {
    Reason.UNSCHEDULABLE: Wait.ROOM,
    Reason.GANG_UNSCHEDULABLE: Wait.ROOM,
    Reason.TOPOLOGY_UNSATISFIED: Wait.ROOM,
    Reason.FRAGMENTED: Wait.ROOM,
    Reason.QUEUE_AT_FAIR_SHARE: Wait.ROOM,
    Reason.WAITING_FOR_RECLAIM: Wait.ROOM,
    Reason.RECLAIM_BLOCKED: Wait.ROOM,
    Reason.WAITING_FOR_MIN_RUNTIME: Wait.ROOM,
    Reason.WAITING_FOR_CAPACITY: Wait.IDLE,
    Reason.OVER_LIMIT: Wait.QUEUE_RULE,
    Reason.OVER_QUOTA: Wait.QUEUE_RULE,
    Reason.GANG_INCOMPLETE: Wait.GANG,
    Reason.GANG_BELOW_MIN_MEMBER: Wait.GANG,
    Reason.INVALID_REQUEST: Wait.INVALID,
    Reason.INVALID_QUEUE: Wait.INVALID,
    Reason.INVALID_TOPOLOGY: Wait.INVALID,
    Reason.BIND_FAILED: Wait.BIND,
    Reason.PIPELINED: Wait.RELEASING,
    Reason.RESERVATION_DROPPED: Wait.ROOM,
    Reason.WAITING: Wait.NEXT_CYCLE,
    Reason.WAITING_FOR_DEVICE_PLUGIN: Wait.DEVICE_PLUGIN,
    Reason.SCHEDULING_GATED: Wait.GATED,
}

_MEANING = {
    Reason.UNSCHEDULABLE: "no node has room for it now",
    Reason.GANG_UNSCHEDULABLE: "the gang cannot be placed whole",
    Reason.TOPOLOGY_UNSATISFIED: "no domain of its required topology level can hold it whole now",
    Reason.FRAGMENTED: "enough GPU is free in total, but in pieces; consolidation may make room",
    Reason.QUEUE_AT_FAIR_SHARE: "its queue has its fair share; it runs when others finish or need less",
    Reason.WAITING_FOR_RECLAIM: "room is being reclaimed from queues over their fair share",
    Reason.RECLAIM_BLOCKED: "evicting the pods that would make room breaks a queue rule (named in the message)",
    Reason.WAITING_FOR_MIN_RUNTIME: (
        "the pods that could make room have not run their queue's minimum runtime yet; tried again when "
        "the first may go"
    ),
    Reason.WAITING_FOR_CAPACITY: "its queue is below its fair share, but no queue is over its own",
    Reason.OVER_LIMIT: "its queue (or a parent) would go over its limit",
    Reason.OVER_QUOTA: "non-preemptible work only runs inside its queue's quota",
    Reason.GANG_INCOMPLETE: "fewer gang members exist than minMember",
    Reason.GANG_BELOW_MIN_MEMBER: "a running gang lost members below minMember",
    Reason.INVALID_REQUEST: "the pod's GPU request is invalid: fix the pod",
    Reason.INVALID_QUEUE: "the pod's queue does not exist or is not a leaf",
    Reason.INVALID_TOPOLOGY: "its topology constraint names a Topology or level that does not exist",
    Reason.BIND_FAILED: "the API server refused the bind; retried next cycle",
    Reason.PIPELINED: "its place is reserved; it is bound once the pods still on it have terminated",
    Reason.RESERVATION_DROPPED: "the place reserved for it could not be kept (why is in the message)",
    Reason.WAITING: "arrived after the last cycle",
    Reason.WAITING_FOR_DEVICE_PLUGIN: (
        "the nodes it fits each have a pod bound that the device plugin has yet to allocate (one at a time "
        "per node); placed once one has"
    ),
    Reason.SCHEDULING_GATED: "its spec.schedulingGates are not all removed yet (as kube-scheduler, it is not scheduled)",
}


# Waits the actions that make room act on: consolidate only on room; preempt also on its queue's rules
# (evicting in the queue frees its limit), reclaim also on a limit (taken from a queue under the same
# limited parent, the victims free it).
MAKING_ROOM_HELPS = frozenset({Wait.ROOM})
PREEMPTING_HELPS = frozenset({Wait.ROOM, Wait.QUEUE_RULE})
RECLAIMING_HELPS = PREEMPTING_HELPS


@dataclass
class PendingReason:
    reason: Reason
    message: str
