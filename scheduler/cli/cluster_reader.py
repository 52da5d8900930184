"""Read-only access to a cluster for the inspecting commands (`queues`, `why`, `doctor`), as plain dicts.

The commands see the API only through `ClusterReader`, so their logic is tested with objects the real
API server returned (or the chart rendered) and, end to end, against a real API server.
"""

from __future__ import annotations

import json
import warnings
from typing import Any, Protocol

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from scheduler.api.keys import GROUP, VERSION

Obj = dict[str, Any]


class ReadError(RuntimeError):
    """The API answered with an error other than 404 (or not at all); the message is one line."""


# kind -> apiVersion, for the kinds the commands read.
API_VERSIONS: dict[str, str] = {
    "Node": "v1",
    "Pod": "v1",
    "Event": "v1",
    "Service": "v1",
    "Namespace": "v1",
    "Queue": f"{GROUP}/{VERSION}",
    "PodGroup": f"{GROUP}/{VERSION}",
    "GPUNodeReport": f"{GROUP}/{VERSION}",
    "CustomResourceDefinition": "apiextensions.k8s.io/v1",
    "MutatingWebhookConfiguration": "admissionregistration.k8s.io/v1",
    "ValidatingWebhookConfiguration": "admissionregistration.k8s.io/v1",
    "EndpointSlice": "discovery.k8s.io/v1",
    "Lease": "coordination.k8s.io/v1",
    "PriorityClass": "scheduling.k8s.io/v1",
}
# Kinds read under another name: KAI Scheduler's Queue (docs/kai-compat.md), next to Tessera's.
ALIASES: dict[str, tuple[str, str]] = {"KaiQueue": ("scheduling.run.ai/v2", "Queue")}


class ClusterReader(Protocol):
    def server_version(self) -> str:
        """`v1.34.4`-style version of the API server; raises ReadError when it cannot be reached."""
        ...

    def list(
        self, kind: str, namespace: str | None = None, *, labels: str = "", fields: str = ""
    ) -> list[Obj]:
        """Objects of `kind` (all namespaces when `namespace` is None); [] when the kind is not served."""
        ...

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        """One object, or None when it does not exist."""
        ...

    def dry_run_create(self, pod: Obj) -> str | None:
        """Create `pod` with dryRun=All (admission runs, nothing is stored): None when admitted, else the
        API server's refusal. Raises ReadError when the request itself failed."""
        ...


def _refusal(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or f"HTTP {exc.status}")


class KubeReader:
    """`ClusterReader` over the official client's dynamic client (the kinds are found by discovery, as
    kubectl finds them)."""

    def __init__(self, api: client.ApiClient, timeout_s: float = 15.0) -> None:
        if (
            not api.configuration.verify_ssl
        ):  # the kubeconfig says insecure-skip-tls-verify: the user chose it
            warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
        self.api = api
        self.timeout_s = timeout_s
        self._dynamic: Any = None

    def _resource(self, kind: str) -> Any:
        from kubernetes.dynamic import DynamicClient
        from kubernetes.dynamic.exceptions import ResourceNotFoundError

        if self._dynamic is None:
            try:
                self._dynamic = DynamicClient(self.api)
            except ApiException as exc:
                raise ReadError(f"API discovery failed: {exc.status} {_refusal(exc)}") from None
            except Exception as exc:
                raise ReadError(
                    f"cannot reach the API server at {self.api.configuration.host}: {_short(exc)}"
                ) from None
        api_version, real_kind = ALIASES.get(kind) or (API_VERSIONS[kind], kind)
        try:
            return self._dynamic.resources.get(api_version=api_version, kind=real_kind)
        except ResourceNotFoundError:
            return None

    def server_version(self) -> str:
        try:
            info = client.VersionApi(self.api).get_code(_request_timeout=self.timeout_s)
        except ApiException as exc:
            raise ReadError(f"the API server answered {exc.status} {_refusal(exc)}") from None
        except Exception as exc:  # connection refused, TLS, DNS: all mean "not reachable"
            raise ReadError(
                f"cannot reach the API server at {self.api.configuration.host}: {_short(exc)}"
            ) from None
        return str(info.git_version)

    def list(
        self, kind: str, namespace: str | None = None, *, labels: str = "", fields: str = ""
    ) -> list[Obj]:
        resource = self._resource(kind)
        if resource is None:
            return []
        try:
            found = resource.get(
                namespace=namespace,
                label_selector=labels or None,
                field_selector=fields or None,
                _request_timeout=self.timeout_s,
            )
        except ApiException as exc:
            if exc.status == 404:
                return []
            raise ReadError(f"cannot list {kind}s: {exc.status} {_refusal(exc)}") from None
        except Exception as exc:
            raise ReadError(f"cannot list {kind}s: {_short(exc)}") from None
        items = found.to_dict().get("items") or []
        api_version, real_kind = ALIASES.get(kind) or (API_VERSIONS[kind], kind)
        for item in items:  # list items come without kind
            item.setdefault("kind", real_kind)
            item.setdefault("apiVersion", api_version)
        return list(items)

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        resource = self._resource(kind)
        if resource is None:
            return None
        try:
            found = resource.get(name=name, namespace=namespace, _request_timeout=self.timeout_s)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise ReadError(f"cannot read {kind} {name}: {exc.status} {_refusal(exc)}") from None
        except Exception as exc:
            raise ReadError(f"cannot read {kind} {name}: {_short(exc)}") from None
        return dict(found.to_dict())

    def dry_run_create(self, pod: Obj) -> str | None:
        namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
        resource = self._resource("Pod")
        try:
            resource.create(
                body=pod,
                namespace=namespace,
                query_params=[("dryRun", "All")],
                _request_timeout=self.timeout_s,
            )
        except ApiException as exc:
            message = _refusal(exc)
            if exc.status in (400, 403, 422) or "webhook" in message:  # an unreachable webhook is a 500
                return message
            raise ReadError(f"dry-run pod create failed: {exc.status} {_refusal(exc)}") from None
        except Exception as exc:
            raise ReadError(f"dry-run pod create failed: {_short(exc)}") from None
        return None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
