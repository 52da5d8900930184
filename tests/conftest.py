"""Root test configuration. Area-specific fixtures live in tests/<area>/conftest.py."""

import os

# Kernels and the cycle must behave the same on every backend; tests pick numpy unless they ask otherwise.
os.environ.setdefault("TESSERA_ARRAY_BACKEND", "numpy")

# The fake Kubernetes API server's fixtures (kube_api), shared by every area's tests.
pytest_plugins = ["tests.fakes.fixtures"]
