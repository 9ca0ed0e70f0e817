"""One lock for the CUDA work that must not overlap a graph capture in another thread.

A CUDA graph capture runs in thread-local mode (``backends/cuda_graphs.py``), so other threads may
keep serving. Setting up and tearing down GPU models (weights copied on the default stream, device
synchronisations, ``empty_cache``) still takes this lock, so that no device-wide call meets a
capture that is in progress, whichever model loads or unloads meanwhile.
"""

from __future__ import annotations

import threading

CUDA_SETUP_LOCK = threading.RLock()
