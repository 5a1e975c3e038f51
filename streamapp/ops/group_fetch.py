"""Asks the group's workers for their ``/streamapp/assignment`` views, concurrently, over HTTP.

Async with a timeout per request, so a worker that does not answer costs the page at most
``timeout_s`` and never blocks the event loop; `streamapp.ops.group_page` combines the answers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp

#: Bound on each worker's answer: the page polls every 2 s.
FETCH_TIMEOUT_S = 1.5
ASSIGNMENT_PATH = "/streamapp/assignment"


async def fetch_views(
    urls: Sequence[str],
    known: Mapping[str, Mapping[str, Any]],
    *,
    timeout_s: float = FETCH_TIMEOUT_S,
) -> tuple[dict[str, Mapping[str, Any]], dict[str, str]]:
    """Every URL's assignment view (``known`` ones are not asked), and why the others failed."""
    views: dict[str, Mapping[str, Any]] = dict(known)
    errors: dict[str, str] = {}
    wanted = [u for u in urls if u not in views]
    if not wanted:
        return views, errors
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        answers = await asyncio.gather(
            *(_fetch(session, url) for url in wanted), return_exceptions=True
        )
    for url, answer in zip(wanted, answers, strict=True):
        if isinstance(answer, BaseException):
            errors[url] = f"{type(answer).__name__}: {answer}".rstrip(": ")
        else:
            views[url] = answer
    return views, errors


async def _fetch(session: aiohttp.ClientSession, url: str) -> Mapping[str, Any]:
    async with session.get(url.rstrip("/") + ASSIGNMENT_PATH) as response:
        response.raise_for_status()
        answer = await response.json()
    if not isinstance(answer, dict):
        raise ValueError("the assignment view is not a JSON object")
    return answer
