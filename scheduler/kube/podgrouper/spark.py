"""Apache Spark on Kubernetes: spark-submit pods and the Spark operator's SparkApplication.

Spark's driver creates the executors and makes itself their controller owner, so the walk from an executor
reaches the driver pod (core API group), then whatever owns the driver:
- bare spark-submit: the driver has no owner; driver and executors carry `spark-app-selector` (the app
  id), which names the group, as KAI does; minMember 1, since executors exist only once the driver runs;
- SparkApplication (Spark operator): the operator owns the driver, so the group is per application,
  minMember 1 (KAI's default grouper);
- ScheduledSparkApplication: each run (SparkApplication) is its own group, like a CronJob's Jobs.
"""

from __future__ import annotations

from scheduler.kube.podgrouper import policy
from scheduler.kube.podgrouper.model import GroupSpec, Obj, Workload, kind_of, labels, name_of, uid_of
from scheduler.kube.podgrouper.names import dns_label, group_name

APP_SELECTOR = "spark-app-selector"
SPARK_ROLE = "spark-role"
APP_NAME = "spark-app-name"


def is_bare_spark_pod(pod: Obj) -> bool:
    own = labels(pod)
    return bool(own.get(APP_SELECTOR)) and (SPARK_ROLE in own or APP_NAME in own)


def bare_rule(w: Workload, driver: Obj) -> GroupSpec:
    return policy.build(
        w,
        name=dns_label(str(labels(driver)[APP_SELECTOR])),
        min_member=1,
        owner=driver,
        rule="spark-submit",
    )


def application_rule(w: Workload, app: Obj) -> GroupSpec:
    return policy.build(w, name=group_name(name_of(app), uid_of(app)), min_member=1, owner=app)


def scheduled_rule(w: Workload, scheduled: Obj) -> GroupSpec:
    run = w.below(scheduled)
    return application_rule(w, run if kind_of(run) == "SparkApplication" else scheduled)
