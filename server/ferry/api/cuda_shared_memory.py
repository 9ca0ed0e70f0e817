"""The CUDA shared memory extension as Triton built without GPU support answers it.

Ferry has no CUDA IPC, so no CUDA region can ever be registered: the status is an empty list and
unregistering (one region or all) succeeds with nothing to do, as in such a Triton build, so
clients that clean up after themselves (every shared-memory example does) work. Registering a
region is the only call that fails, naming what is missing.
"""

from __future__ import annotations

from typing import Any

from ..errors import NotFound, Unimplemented


def cuda_status(name: str = "") -> list[dict[str, Any]]:
    """No region is ever registered: all of them is ``[]``, a named one is not found."""
    if name:
        raise NotFound(f"unable to find cuda shared memory region '{name}'")
    return []


def cuda_unregister(name: str = "") -> None:
    """Nothing is registered, so there is nothing to remove: succeeds, as Triton does."""


def cuda_register_refused(name: str) -> Unimplemented:
    return Unimplemented(
        f"cannot register CUDA shared memory region '{name}': this server has no CUDA IPC support "
        "(CUDA shared memory is not available); use system shared memory"
    )
