"""Restart strategies: what the job does when a task fails."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "RestartStrategy",
    "fixed_delay_restart",
    "no_restart",
]


@dataclass(frozen=True)
class RestartStrategy:
    """Restart up to ``attempts`` times, waiting ``delay_ms`` before each restart.

    A restart restores the latest completed checkpoint of the job (or what the job
    started from). ``attempts == 0`` means the first failure fails the job.
    """

    attempts: int
    delay_ms: int = 1000

    def __post_init__(self) -> None:
        if self.attempts < 0 or self.delay_ms < 0:
            raise ValueError("restart attempts and delay must be >= 0")


def fixed_delay_restart(attempts: int, delay_ms: int = 1000) -> RestartStrategy:
    """Flink's fixed-delay strategy."""
    return RestartStrategy(attempts, delay_ms)


def no_restart() -> RestartStrategy:
    """Fail the job on the first task failure."""
    return RestartStrategy(0, 0)
