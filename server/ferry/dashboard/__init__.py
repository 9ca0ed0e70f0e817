"""The built-in web dashboard: models, live latency and throughput, and "try an image"."""

from .routes import mount_dashboard

__all__ = ["mount_dashboard"]
