"""Request queues and instance workers: how requests reach model instances."""

from .scheduler import Scheduler

__all__ = ["Scheduler"]
