"""The CUDA shared memory extension where this server cannot open CUDA IPC handles.

CUDA regions are registered in the system shared memory registry (``shared_memory.py``) when torch
sees a GPU. Without one (or without torch), no CUDA region can ever be registered: the status is an
empty list and unregistering (one region or all) succeeds with nothing to do, as in a Triton build
without GPU support, so clients that clean up after themselves (every shared-memory example does)
work. Registering a region is the only call that fails, naming what is missing.
"""

from __future__ import annotations

from ..errors import Unimplemented


def cuda_register_refused(name: str) -> Unimplemented:
    return Unimplemented(
        f"cannot register CUDA shared memory region '{name}': this server has no CUDA IPC support "
        "(CUDA shared memory is not available); use system shared memory"
    )
