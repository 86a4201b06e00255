"""Which memories' facts hold: the one predicate of valid time, for SQL and for the ORM.

A memory holds from ``valid_from`` until ``valid_until`` (null: still holds). By default a read
keeps the memories whose validity has not ended (a superseded memory has); ``as_of`` keeps those
valid at that moment instead (begun by then, not ended by then), and ``include_superseded``
keeps every memory whatever its interval. Search (``memory.search.legs``), working memory
(through search), the memories list and consolidation's neighbours all read through this.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

from config.api import ApiError
from config.datetimes import client_datetime_parse

# The predicate, as a condition to append to a WHERE over memory_memory, with the parameters
# %(now)s, %(as_of)s and %(include_superseded)s (``Validity.params``). Every value is a
# parameter, so callers compose no SQL by the request; the client-side binding puts the values
# in the text, and the planner folds what they leave constant.
VALIDITY_SQL = """ AND (%(include_superseded)s OR (
    (valid_until IS NULL OR valid_until > coalesce(%(as_of)s, %(now)s))
    AND valid_from <= coalesce(%(as_of)s, 'infinity'::timestamptz)))"""
# VALIDITY_SQL for the default (neither as_of nor include_superseded), where only %(now)s is
# bound: reads that never reach superseded memories (consolidation's neighbours).
CURRENTLY_VALID_SQL = " AND (valid_until IS NULL OR valid_until > %(now)s)"


@dataclass(frozen=True)
class Validity:
    """Which memories a read keeps by their validity interval."""

    as_of: datetime | None = None
    include_superseded: bool = False

    def params(self) -> dict[str, object]:
        """VALIDITY_SQL's parameters besides %(now)s."""
        return {"as_of": self.as_of, "include_superseded": self.include_superseded}

    def q(self, *, now: datetime) -> Q:
        """The same condition for a queryset."""
        if self.as_of is not None:
            return Q(valid_from__lte=self.as_of) & (
                Q(valid_until__isnull=True) | Q(valid_until__gt=self.as_of)
            )
        if self.include_superseded:
            return Q()
        return Q(valid_until__isnull=True) | Q(valid_until__gt=now)


CURRENTLY_VALID = Validity()


def validity_chosen(*, as_of: datetime | None, include_superseded: bool) -> Validity:
    """The validity a request asks for; both at once is refused (``invalid_parameter``)."""
    if as_of is not None and include_superseded:
        raise ApiError(
            code="invalid_parameter",
            message="Give as_of (what was valid then) or include_superseded (everything), "
            "not both.",
        )
    return Validity(as_of=as_of, include_superseded=include_superseded)


def validity_from_query(params: Mapping[str, str]) -> Validity:
    """The validity of a list's query parameters ``as_of`` and ``include_superseded``."""
    as_of = None
    if params.get("as_of"):
        # The shared parser: an offset of 24 h or more, or year 1 east of UTC, is "no instant"
        # (a 400), never a 500 from Python or PostgreSQL.
        as_of = client_datetime_parse(params["as_of"])
        if as_of is None:
            raise ApiError(
                code="invalid_parameter",
                message="as_of must be an ISO 8601 date and time with an offset under 24 hours, "
                "e.g. 2026-05-01T12:00:00Z.",
            )
    return validity_chosen(
        as_of=as_of, include_superseded=params.get("include_superseded") == "true"
    )
