"""Root test configuration. Area-specific fixtures live in tests/<area>/conftest.py."""

import os

# Kernels and the cycle must behave the same on every backend; tests pick numpy unless they ask otherwise.
os.environ.setdefault("TESSERA_ARRAY_BACKEND", "numpy")

# Fixtures shared by every area's tests: the real control plane (control_plane, kube_admin, namespace) and
# the in-test fake API server (kube_api), kept for faults the real one cannot produce.
pytest_plugins = ["tests.controlplane.fixtures", "tests.fakes.fixtures"]
