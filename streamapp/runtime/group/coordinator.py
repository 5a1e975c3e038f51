"""streamapp's group coordinator: aiokafka's, with every behaviour of this package.

Each behaviour is a subclass of aiokafka's ``GroupCoordinator`` in a module of its own,
overriding the steps it changes and calling aiokafka's for the rest; `Coordinator` combines
them. Only `streamapp.runtime.group.consumer.WorkerConsumer` builds one: aiokafka's class, and
every other consumer in the process, are left as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamapp.runtime.group.commit_generation import GenerationKeepingCommits
from streamapp.runtime.group.cooperative import CooperativeJoin
from streamapp.runtime.group.join_answers import JoinAnswers
from streamapp.runtime.group.member_envelopes import ReadableEnvelopes
from streamapp.runtime.group.static_membership import StaticMembership


class Coordinator(
    StaticMembership,
    JoinAnswers,
    CooperativeJoin,
    ReadableEnvelopes,
    GenerationKeepingCommits,
):
    """aiokafka's ``GroupCoordinator`` with streamapp's group protocol:

    - static membership made safe to stop and to fence (`static_membership`);
    - error answers to JoinGroup and SyncGroup survived (`join_answers`);
    - the cooperative protocol, KIP-429 (`cooperative`), with prompt heartbeats after a join
      (`prompt_heartbeats`);
    - a member subscription the leader cannot decode read as no topics (`member_envelopes`);
    - a commit refused for an older generation leaving the newer one alone
      (`commit_generation`).

    Built with aiokafka's own arguments (``client``, ``subscription`` and its keywords), and
    streamapp's: ``leave_group_on_stop`` (a static member's stop sends LeaveGroup) and
    ``on_fenced`` (called once with one line when another worker took this one's instance id;
    by default the worker stops).
    """

    def __init__(
        self,
        client: Any,
        subscription: Any,
        *,
        leave_group_on_stop: bool = True,
        on_fenced: Callable[[str], None] | None = None,
        **options: Any,
    ) -> None:
        self.use_static_options(leave_group_on_stop=leave_group_on_stop, on_fenced=on_fenced)
        super().__init__(client, subscription, **options)
