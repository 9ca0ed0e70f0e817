"""Scheduling policy read from the model config: batching limits, priorities and queue policies.

Pure data, so the batcher's rules can be unit-tested without a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ferry_client.protocol import model_config_pb2 as mc

from ..errors import InvalidArgument


@dataclass(frozen=True)
class QueuePolicy:
    """Triton's ModelQueuePolicy for one priority level (times in nanoseconds, 0 = none)."""

    max_queue_size: int = 0
    default_timeout_ns: int = 0
    allow_timeout_override: bool = False
    delay_on_timeout: bool = False  # timeout_action DELAY instead of REJECT

    @classmethod
    def from_config(cls, policy: mc.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            max_queue_size=policy.max_queue_size,
            default_timeout_ns=policy.default_timeout_microseconds * 1000,
            allow_timeout_override=policy.allow_timeout_override,
            delay_on_timeout=policy.timeout_action == mc.ModelQueuePolicy.DELAY,
        )

    def timeout_ns(self, requested_us: int | None) -> int:
        """The request's queue timeout: its own value only where the policy allows overriding."""
        if requested_us and self.allow_timeout_override:
            return requested_us * 1000
        return self.default_timeout_ns


@dataclass(frozen=True)
class SchedulingPolicy:
    """How requests of one model are queued and batched."""

    max_batch_size: int = 0  # 0: the model takes no batch dimension; requests run one by one
    dynamic: bool = False  # dynamic_batching present: several requests may share one execution
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_ns: int = 0
    priority_levels: int = 0  # 0: one level
    default_priority: int = 1
    queue_policies: dict[int, QueuePolicy] = field(default_factory=dict)

    @classmethod
    def from_config(cls, config: mc.ModelConfig) -> SchedulingPolicy:
        if not config.HasField("dynamic_batching"):
            return cls(max_batch_size=config.max_batch_size)
        batching = config.dynamic_batching
        levels = batching.priority_levels
        default_level = batching.default_priority_level or (1 if levels == 0 else (levels + 1) // 2)
        default_policy = QueuePolicy.from_config(batching.default_queue_policy)
        policies = {level: default_policy for level in range(1, max(levels, 1) + 1)}
        for level, policy in batching.priority_queue_policy.items():
            policies[level] = QueuePolicy.from_config(policy)
        return cls(
            max_batch_size=config.max_batch_size,
            dynamic=config.max_batch_size > 0,
            preferred_batch_sizes=tuple(sorted(set(batching.preferred_batch_size))),
            max_queue_delay_ns=batching.max_queue_delay_microseconds * 1000,
            priority_levels=levels,
            default_priority=default_level,
            queue_policies=policies,
        )

    @property
    def levels(self) -> list[int]:
        return list(range(1, max(self.priority_levels, 1) + 1))

    def level_for(self, priority: int | None) -> int:
        """Map a request's ``priority`` parameter (0 or absent: the default) to a queue level."""
        if not priority:
            return self.default_priority
        top = max(self.priority_levels, 1)
        if priority < 0 or priority > top:
            raise InvalidArgument(f"priority {priority} is outside 1..{top} (the model's priority_levels)")
        return priority

    def policy_for(self, level: int) -> QueuePolicy:
        policy = self.queue_policies.get(level)
        return _NO_QUEUE_POLICY if policy is None else policy  # not a fresh default per request


#: The queue policy of a level the config says nothing about (frozen: one shared instance).
_NO_QUEUE_POLICY = QueuePolicy()
