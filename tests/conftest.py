"""Root test configuration. Area-specific fixtures live in tests/<area>/conftest.py."""

import os

# Kernels and the cycle must behave the same on every backend; tests pick numpy unless they ask otherwise.
os.environ.setdefault("TESSERA_ARRAY_BACKEND", "numpy")
