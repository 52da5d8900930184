"""Root test configuration. Area-specific fixtures live in tests/<area>/conftest.py."""

import os

# Kernels and the cycle must behave the same on every backend; tests pick numpy unless they ask otherwise.
os.environ.setdefault("TESSERA_ARRAY_BACKEND", "numpy")

# Fixtures shared by every area's tests: the real control plane (control_plane, kube_admin, namespace, tessera,
# scene, fault_proxy). Faults come from the proxy in front of the real API server (tests/controlplane/).
pytest_plugins = ["tests.controlplane.fixtures"]
