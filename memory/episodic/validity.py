"""Which memories' facts hold: the one predicate of valid time, for SQL and for the ORM.

A memory holds from ``valid_from`` until ``valid_until`` (null: still holds). By default a read
keeps the memories whose validity has not ended (a superseded memory has); ``as_of`` keeps those
valid at that moment instead (begun by then, not ended by then), and ``include_superseded``
keeps every memory whatever its interval. Search (``memory.search.legs``), working memory
(through search), the memories list and consolidation's neighbours all read through this.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q

# A validity that has not ended by %(now)s.
CURRENTLY_VALID_SQL = " AND (valid_until IS NULL OR valid_until > %(now)s)"
# Valid at %(as_of)s.
VALID_AS_OF_SQL = (
    " AND valid_from <= %(as_of)s AND (valid_until IS NULL OR valid_until > %(as_of)s)"
)


@dataclass(frozen=True)
class Validity:
    """Which memories a read keeps by their validity interval."""

    as_of: datetime | None = None
    include_superseded: bool = False

    def sql(self) -> str:
        """A condition to append to a WHERE over memory_memory (" AND ..."), with the parameters
        %(now)s and, given ``as_of``, %(as_of)s."""
        if self.as_of is not None:
            return VALID_AS_OF_SQL
        return "" if self.include_superseded else CURRENTLY_VALID_SQL

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
