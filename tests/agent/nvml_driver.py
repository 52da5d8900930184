"""Whether this machine has a working NVIDIA driver (the no-driver tests only make sense without one)."""

import pynvml


def driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True
