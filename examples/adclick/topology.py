"""Topic names, partition counts and join settings of one demo deployment.

Workers get these through ``ADCLICK_*`` environment variables (set by the demo,
the tests and the benchmark before starting `streamapp worker`), so several
runs can share one broker without sharing topics.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

ENV_PREFIX = "ADCLICK_"


class CopartitionError(RuntimeError):
    """Topics declared as joined do not have the same number of partitions."""


@dataclass(frozen=True)
class Topology:
    app_id: str = "adclick"
    prefix: str = ""  # prepended to every topic the demo owns, to isolate runs
    partitions: int = 6  # impressions and clicks: the join's co-partition group
    campaign_partitions: int = 3  # the per-campaign repartition topics: the second group
    window_ms: int = 10_000
    grace_ms: int = 2_000
    expiry_bucket_ms: int = 100  # narrow: each index write stays small
    processing_guarantee: str = "at_least_once"

    @property
    def impressions(self) -> str:
        return f"{self.prefix}impressions"

    @property
    def clicks(self) -> str:
        return f"{self.prefix}clicks"

    @property
    def attributed(self) -> str:
        return f"{self.prefix}adclick-attributed"

    @property
    def dead_letters(self) -> str:
        return f"{self.prefix}adclick-dead-letters"

    @property
    def campaign_impressions(self) -> str:
        return f"{self.prefix}adclick-campaign-impressions"

    @property
    def campaign_clicks(self) -> str:
        return f"{self.prefix}adclick-campaign-clicks"

    def changelog(self, table: str) -> str:
        # Faust's naming: <app id>-<table name>-changelog.
        return f"{self.app_id}-{table}-changelog"

    @property
    def joined_groups(self) -> list[list[str]]:
        """The co-partition groups the app declares: the join, and the campaign aggregate."""
        return [
            [self.impressions, self.clicks],
            [self.campaign_impressions, self.campaign_clicks],
        ]

    def topic_partitions(self) -> dict[str, int]:
        """Every topic the demo creates up front, with its partition count."""
        return {
            self.impressions: self.partitions,
            self.clicks: self.partitions,
            self.attributed: self.partitions,
            self.dead_letters: 1,
            self.campaign_impressions: self.campaign_partitions,
            self.campaign_clicks: self.campaign_partitions,
        }

    def changelog_partitions(self) -> dict[str, int]:
        """The tables' changelog topics, each partitioned like the topics its table follows."""
        counts = {t: self.partitions for t in ("impressions", "pending-clicks", "counters")}
        counts["campaign-stats"] = self.campaign_partitions
        return {self.changelog(table): n for table, n in counts.items()}

    def to_env(self) -> dict[str, str]:
        return {ENV_PREFIX + name.upper(): str(value) for name, value in vars(self).items()}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Topology:
        env = os.environ if env is None else env
        defaults = cls()
        values: dict[str, object] = {}
        for name, default in vars(defaults).items():
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is None:
                continue
            try:
                values[name] = type(default)(raw)
            except ValueError:
                raise ValueError(
                    f"{ENV_PREFIX}{name.upper()}={raw!r} is not a valid {type(default).__name__}"
                ) from None
        return cls(**values)  # type: ignore[arg-type]


def check_copartitioned(groups: list[list[str]], partition_counts: Mapping[str, int]) -> None:
    """Raise one clear `CopartitionError` naming the topics and counts of a mismatched group."""
    for group in groups:
        missing = [t for t in group if t not in partition_counts]
        if missing:
            raise CopartitionError(
                f"topics joined with {', '.join(group)} do not exist: {', '.join(missing)}"
            )
        counts = {t: partition_counts[t] for t in group}
        if len(set(counts.values())) > 1:
            listed = ", ".join(f"{t} has {n} partitions" for t, n in counts.items())
            raise CopartitionError(
                f"co-partitioned topics must have the same partition count: {listed}; "
                "recreate them with equal counts (records with one key must land on the "
                "same partition number in every joined topic)"
            )
