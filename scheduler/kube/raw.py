"""Requests on the hot path without the generated client's model layer.

The generated `CoreV1Api` methods validate every argument with pydantic and serialise models before the
request is even sent; for a bind (a small JSON body whose answer is ignored) that costs more Python time than
the request itself. `request` goes through the same `ApiClient` (its connection pool, TLS settings and
credentials, tokens refreshed as the generated methods refresh them) and raises the same `ApiException`.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.rest import ApiException

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = JSON,
    timeout: float | tuple[float, float] | None = None,
) -> Any:
    """`method` `path` with a JSON `body`; the decoded answer (None when empty). Raises ApiException."""
    conf: Any = api.configuration
    headers = {**api.default_headers, "Accept": JSON}
    if body is not None:
        headers["Content-Type"] = content_type
    # The client's own lookup: kubeconfig tokens are kept under "authorization" (refreshed when they expire).
    token = conf.get_api_key_with_prefix("BearerToken", alias="authorization")
    if token:
        headers["Authorization"] = token
    resp = api.call_api(
        method, f"{conf.host}{path}", header_params=headers, body=body, _request_timeout=timeout
    )
    data = resp.read()  # read to the end: the connection goes back to the pool
    if not 200 <= resp.status <= 299:
        raise ApiException.from_response(http_resp=resp, body=None, data=None)
    return json.loads(data) if data else None


def pod_path(namespace: str, name: str, sub: str = "") -> str:
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
    return f"{path}/{sub}" if sub else path


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name, safe='')}"
