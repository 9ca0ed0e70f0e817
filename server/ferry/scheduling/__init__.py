"""Request queues and instance workers: how requests reach model instances."""

from .interface import Execution, Memory, ModelScheduler, RequestTiming
from .policy import QueuePolicy, SchedulingPolicy
from .request_batches import RequestBatchScheduler
from .scheduler import Scheduler, choose_batch

__all__ = [
    "Execution",
    "Memory",
    "ModelScheduler",
    "QueuePolicy",
    "RequestBatchScheduler",
    "RequestTiming",
    "Scheduler",
    "SchedulingPolicy",
    "choose_batch",
]
