"""Reading a long listing page by page: each page a short read of its own, resumed
after the last key of the previous one (a keyset page, never an offset)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

__all__ = ["PAGE_SIZE", "pages"]

T = TypeVar("T")

PAGE_SIZE = 1000
"""Rows per page of a listing the command line streams (the largest page)."""

FIRST_PAGE = 50
"""Rows of the first page: ``| head`` reads this few; each next page is twice the last,
up to :data:`PAGE_SIZE`."""


def pages(
    read: Callable[[str | None, int], Sequence[T]],
    key: Callable[[T], str],
    size: int | None = None,
) -> Iterator[list[T]]:
    """The pages ``read(after, size)`` returns, ``after`` being ``key`` of the last item
    of the previous page (None for the first), until a page comes back short. Pages
    start at :data:`FIRST_PAGE` rows and double up to ``size`` (:data:`PAGE_SIZE`
    unless given)."""
    largest = PAGE_SIZE if size is None else size
    if largest < 1:
        raise ValueError(f"page size must be at least 1, not {largest}")
    wanted = min(FIRST_PAGE, largest)
    after: str | None = None
    while True:
        page = list(read(after, wanted))
        if page:
            yield page
        if len(page) < wanted:
            return
        after = key(page[-1])
        wanted = min(2 * wanted, largest)
