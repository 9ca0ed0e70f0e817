"""Request queues and instance workers: how requests reach model instances."""

from .policy import QueuePolicy, SchedulingPolicy
from .scheduler import Scheduler, choose_batch

__all__ = ["QueuePolicy", "Scheduler", "SchedulingPolicy", "choose_batch"]
