"""Fixtures for the deploy tests: chart renders with default and custom values (rendered once)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.deploy.deploy_support import CUSTOM_VALUES, Manifest, needs_helm, render_chart


@pytest.fixture(scope="session")
def render() -> Callable[..., list[Manifest]]:
    needs_helm()
    cache: dict[str, list[Manifest]] = {}

    def _render(values: dict[str, Any] | None = None, **kwargs: str) -> list[Manifest]:
        key = repr((values, sorted(kwargs.items())))
        if key not in cache:
            cache[key] = render_chart.render(values, **kwargs)
        return copy.deepcopy(cache[key])

    return _render


@pytest.fixture(scope="session")
def default_objects(render: Callable[..., list[Manifest]]) -> list[Manifest]:
    return render({})


@pytest.fixture(scope="session", params=sorted(CUSTOM_VALUES))
def custom_case(request: pytest.FixtureRequest, render: Callable[..., list[Manifest]]) -> Iterator[Any]:
    name = request.param
    yield name, CUSTOM_VALUES[name], render(CUSTOM_VALUES[name])
