"""KAI test cases in which Tessera decides otherwise, each with the reason (docs/differences-from-kai.md)."""

MOVES_VICTIMS = (
    "KAI's reclaim and preempt move a victim that fits elsewhere (consolidating reclaim) instead of evicting "
    "it; Tessera's evict it (only consolidation moves pods), so the victim is Releasing, not Pipelined"
)
ROUNDED_SHARES = (
    "KAI rounds each queue's over-quota fair share down to whole GPUs and hands the remainders out one GPU "
    "at a time (here 1 spare GPU split 3:1 goes whole to queue0: fair shares 2 and 2); Tessera divides it "
    "exactly by weight (1.75 and 2.25), so queue0's half GPU would pass its fair share and it does not reclaim"
)

DIFFERS: dict[str, str] = {
    "consolidationGpuMemory_test.go: consolidate three jobs to enable two large tasks": (
        "two plans of two moves each: Tessera moves running_job0 and running_job2 where its binpack puts them, "
        "KAI running_job1 and running_job2 (the gang's members are planned one at a time)"
    ),
    "consolidation_test.go: 2 jobs running on different nodes - verify build job allocation isn't handled by "
    "consolidation": (
        "Tessera's make-room actions also place a job that fits on free capacity with no victim (in Tessera's "
        "cycle `allocate` ran first, so such room was freed earlier in the cycle); KAI leaves it to allocate. "
        "Tessera also consolidates for non-preemptible jobs, which KAI never does"
    ),
    "preempt_elastic_test.go: Inference job preempts single task, moves one task from elastic train job": MOVES_VICTIMS,
    "reclaim_test.go: queue0 is under fair share, queue1 is over fair share - reclaim": ROUNDED_SHARES,
    "reclaim_test.go: queue0 is under deserved quota, queue1 is over deserved quota but not over fair share - "
    "reclaim": MOVES_VICTIMS,
    "reclaim_test.go: queue0 is under deserved quota and submitted multiple jobs, queue1 is over deserved quota "
    "but not over fair share - reclaim single job": MOVES_VICTIMS,
    "reclaim_test.go: queue1 is under deserved quota, queue0 has exactly deserved quota - should consolidate q0 "
    "to node0 and pipeline q1 to node1": MOVES_VICTIMS,
    "reclaim_test.go: Reclaim based on releasing resources with consolidation": MOVES_VICTIMS,
}
