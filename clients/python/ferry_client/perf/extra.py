"""How to install the perf extra: from the Ferry checkout (``ferry-client`` on PyPI is not this project)."""

PERF_INSTALL_HINT = (
    "pip install '.[perf]' in the Ferry checkout (or './clients/python[perf]' where only the client is installed)"
)
