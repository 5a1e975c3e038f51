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
#: The windowed join's name: its tables are ``<name>-left`` (clicks) and ``<name>-right``.
JOIN_NAME = "attribution"


@dataclass(frozen=True)
class Topology:
    app_id: str = "adclick"
    prefix: str = ""  # prepended to every topic the demo owns, to isolate runs
    partitions: int = 6  # impressions and clicks: the join's co-partition group
    campaign_partitions: int = 3  # the per-campaign repartition topics: the second group
    window_ms: int = 10_000
    grace_ms: int = 2_000
    # The join's expiry buckets (docs/joins.md): an unmatched click is counted up to 1 s after
    # it expired, and a batch's sweep finds a bucket due (and flushes the producer) about once
    # per second of event time and partition; 100 ms made that nearly every batch.
    expiry_bucket_ms: int = 1_000
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
        tables = (f"{JOIN_NAME}-left", f"{JOIN_NAME}-right", "counters")
        counts = {t: self.partitions for t in tables}
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
