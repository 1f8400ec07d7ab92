"""What the server and its clients agree on, in one place that imports nothing heavy:
problem type URIs, page sizes, the longest long poll."""

from __future__ import annotations

import re

__all__ = [
    "CURSOR_HEADER",
    "MAX_PAGE",
    "MAX_WAIT_SECONDS",
    "MORE_HEADER",
    "NEXT_HEADER",
    "NOT_DONE",
    "NO_RULE",
    "PROBLEM_JSON",
    "PROBLEM_PREFIX",
    "problem_type",
]

PROBLEM_JSON = "application/problem+json"
PROBLEM_PREFIX = "urn:hcat-notify:problem:"
NOT_DONE = f"{PROBLEM_PREFIX}not-done"
"""The type of the 404 that says no retained mark-set-done covers a spec."""

NO_RULE = f"{PROBLEM_PREFIX}no-rule"
"""The type of the 404 that says a table has no completeness rule in force."""

CURSOR_HEADER = "Hcat-Cursor"
"""The response header that carries an event page's cursor where the body cannot (a
CloudEvents batch is a bare JSON array)."""
MORE_HEADER = "Hcat-More"
"""The response header that says, ``true`` or ``false``, whether such a page is full."""
NEXT_HEADER = "Hcat-Next"
"""The response header that carries such a page's ``next`` (the ``after`` of the next
page read without a cursor), when it has one."""

MAX_PAGE = 10_000
"""The most partitions or events one page holds."""

MAX_WAIT_SECONDS = 300.0
"""The longest long poll: under common load balancers' idle-timeout maxima, long enough
that a scheduler asks a few times an hour."""


def problem_type(error: str) -> str:
    """``TableNotFoundError`` -> ``urn:hcat-notify:problem:table-not-found``."""
    words = re.findall(r"[A-Z][a-z0-9]*", error.removesuffix("Error")) or ["error"]
    return PROBLEM_PREFIX + "-".join(word.lower() for word in words)
