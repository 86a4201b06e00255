"""The trust core's tables as a projection of the ledger (docs/trust.md lists the kinds).

A rebuild deletes the tenant's rounds, dissents, overrides and score history and replays the
events batch by batch: rows first seen in a batch are bulk-inserted with their ids, changes to
rows of earlier batches are fetched, applied and bulk-updated, so memory stays bounded by the
batch and a million-event ledger replays in one pass. Only the agents' trust fields are kept in
memory to the end (a tenant has thousands of agents, not millions). Only the rows of agents
that exist are replayed: the agents projection, rebuilt first, has replayed every
``agent.deleted``, so a deleted agent's dissents, overrides, score history and round seats stay
gone as its deletion left them. ``DissentEmbedding`` rows are derived data that the embedder
made, so a rebuild never touches them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.utils.dateparse import parse_datetime

from config.sql import row_named, rows_named
from ledger.models import Agent, Event, Tenant
from ledger.services import tenant_write_lock
from trust.rounds.models import (
    OPEN_OVERRIDE,
    ArtifactVersion,
    Dissent,
    Override,
    Round,
    RoundParticipant,
)
from trust.scores.models import TrustScoreChange
from trust.scores.scoring import text_hash

TRUST_EVENT_KINDS = frozenset(
    {
        "round.participants_added",
        "round.finalized",
        "round.output_revised",
        "dissent.logged",
        "dissent.impact_set",
        "override.logged",
        "override.reverted",
        "override.revert_withdrawn",
        "trust.score_changed",
        "trust.rounds_imported",
    }
)

# What a snapshot compares: every column a replay restores, per table, in a stable order.
_SNAPSHOT_QUERIES = {
    "rounds": (
        "SELECT id, round_id, run_id, created_at, final_output, finalized_at, finalized_by,"
        " output, output_hash, output_version FROM trust_round WHERE tenant_id = %s",
        "id",
    ),
    "participants": (
        "SELECT round_id, agent_id, joined_at FROM trust_roundparticipant WHERE tenant_id = %s",
        "round_id, agent_id",
    ),
    "versions": (
        "SELECT round_id, number, content, content_hash, author, created_at"
        " FROM trust_artifactversion WHERE tenant_id = %s",
        "round_id, number",
    ),
    "dissents": (
        "SELECT id, agent_id, round_id, occurred_at, created_at, context, text, rubric_citations,"
        " rubric_version, length_score, citation_score, novelty, novelty_known, depth_score,"
        " impact, feedback_incorporated, impact_set_at, imported"
        " FROM trust_dissent WHERE tenant_id = %s",
        "id",
    ),
    "overrides": (
        "SELECT id, agent_id, round_id, occurred_at, created_at, context, agent_output,"
        " human_decision, agent_output_hash, decision_hash, decided_by, regret,"
        " auto_check_deadline, reverted_by, reverted_at, revert_reason, revert_note"
        " FROM trust_override WHERE tenant_id = %s",
        "id",
    ),
    "score_changes": (
        "SELECT id, agent_id, at, score, reason, components, cause"
        " FROM trust_trustscorechange WHERE tenant_id = %s",
        "id",
    ),
    "agents": (
        "SELECT id, trust_score, rounds_participated FROM ledger_agent WHERE tenant_id = %s",
        "id",
    ),
}

# Children before parents; the dissent vectors are not in the list on purpose.
_REPLAYED_TABLES = (
    "trust_trustscorechange",
    "trust_artifactversion",
    "trust_roundparticipant",
    "trust_round",
    "trust_dissent",
    "trust_override",
)


def _at(value: str | None) -> datetime | None:
    return parse_datetime(value) if value else None


def _when(value: str) -> datetime:
    moment = parse_datetime(value)
    if moment is None:
        raise ValueError(f"not a timestamp: {value!r}")
    return moment


class _Batch:
    """The rows one batch of events creates, and the earlier rows it changes."""

    def __init__(self, *, tenant: Tenant, events: Sequence[Event]) -> None:
        round_pks: set[int] = set()
        dissent_ids: set[int] = set()
        override_ids: set[int] = set()
        for event in events:
            if event.kind.startswith("round."):
                round_pks.add(int(event.payload["round_pk"]))
            elif event.kind == "dissent.impact_set":
                dissent_ids.add(int(event.payload["dissent_id"]))
            elif event.kind == "override.reverted":
                override_ids.update(int(i) for i in event.payload["override_ids"])
            elif event.kind == "override.revert_withdrawn":
                override_ids.add(int(event.payload["override_id"]))
        self.old_rounds: dict[int, Round] = Round.objects.filter(tenant=tenant).in_bulk(round_pks)
        self.old_dissents: dict[int, Dissent] = Dissent.objects.filter(tenant=tenant).in_bulk(
            dissent_ids
        )
        self.old_overrides: dict[int, Override] = Override.objects.filter(tenant=tenant).in_bulk(
            override_ids
        )
        self.rounds: dict[int, Round] = {}
        self.dissents: dict[int, Dissent] = {}
        self.overrides: dict[int, Override] = {}
        self.participants: list[RoundParticipant] = []
        self.versions: list[ArtifactVersion] = []
        self.changes: list[TrustScoreChange] = []

    def round(self, pk: int) -> Round | None:
        return self.rounds.get(pk) or self.old_rounds.get(pk)

    def dissent(self, pk: int) -> Dissent | None:
        return self.dissents.get(pk) or self.old_dissents.get(pk)

    def override(self, pk: int) -> Override | None:
        return self.overrides.get(pk) or self.old_overrides.get(pk)

    def write(self) -> None:
        Round.objects.bulk_create(self.rounds.values())
        Dissent.objects.bulk_create(self.dissents.values())
        Override.objects.bulk_create(self.overrides.values())
        RoundParticipant.objects.bulk_create(self.participants)
        ArtifactVersion.objects.bulk_create(self.versions)
        TrustScoreChange.objects.bulk_create(self.changes)
        if self.old_rounds:
            Round.objects.bulk_update(
                self.old_rounds.values(),
                [
                    "final_output",
                    "finalized_at",
                    "finalized_by",
                    "output",
                    "output_hash",
                    "output_version",
                ],
            )
        if self.old_dissents:
            Dissent.objects.bulk_update(
                self.old_dissents.values(), ["impact", "feedback_incorporated", "impact_set_at"]
            )
        if self.old_overrides:
            Override.objects.bulk_update(
                self.old_overrides.values(),
                ["regret", "reverted_by", "reverted_at", "revert_reason", "revert_note"],
            )


def _version_append(
    tenant: Tenant,
    batch: _Batch,
    round_: Round,
    number: int,
    content: str,
    content_hash: str,
    author: str,
    payload: dict[str, Any],
) -> None:
    round_.output = content
    round_.output_hash = content_hash
    round_.output_version = number
    batch.versions.append(
        ArtifactVersion(
            tenant=tenant,
            round_id=round_.pk,
            number=number,
            content=content,
            content_hash=content_hash,
            author=author,
            created_at=_when(payload["at"]),
        )
    )


class TrustProjection:
    name = "trust"
    owned_kinds = TRUST_EVENT_KINDS
    indexes_all_kinds = False

    def __init__(self) -> None:
        self._scores: dict[int, float] = {}
        self._rounds: dict[int, int] = {}
        self._agents: set[int] = set()
        self._proposal_links: list[tuple[int, int]] = []

    def snapshot(self, *, tenant: Tenant) -> dict[str, tuple[int, str]]:
        """Per table, the row count and an md5 over the rows, computed by PostgreSQL."""
        picture = {}
        with connection.cursor() as cursor:
            for table, (query, order) in _SNAPSHOT_QUERIES.items():
                digest_sql = (
                    "SELECT count(*) AS n, md5(coalesce(string_agg(md5(t::text), ''"  # noqa: S608 (constants)
                    f" ORDER BY {order}), '')) AS digest FROM ({query}) t"
                )
                cursor.execute(digest_sql, [tenant.pk])
                row = row_named(cursor)
                assert row is not None  # an aggregate without GROUP BY answers one row
                picture[table] = (int(row.n), str(row.digest))
        return picture

    def reset(self, *, tenant: Tenant) -> None:
        self._scores = {}
        self._rounds = {}
        self._agents = set(Agent.objects.filter(tenant=tenant).values_list("pk", flat=True))
        with transaction.atomic(), connection.cursor() as cursor:
            tenant_write_lock(tenant)
            # Rubric proposals point at overrides (the governance's rows): unhook them while the
            # overrides are replayed and hook them back in finish().
            # RETURNING sees the new (NULL) value, so the old links come from the CTE.
            cursor.execute(
                """
                WITH linked AS (
                    SELECT id, override_id FROM trust_rubricproposal
                    WHERE tenant_id = %s AND override_id IS NOT NULL FOR UPDATE
                )
                UPDATE trust_rubricproposal AS p SET override_id = NULL
                FROM linked WHERE p.id = linked.id
                RETURNING p.id AS proposal_id, linked.override_id AS override_id
                """,
                [tenant.pk],
            )
            self._proposal_links = [
                (int(row.proposal_id), int(row.override_id)) for row in rows_named(cursor)
            ]
            for table in _REPLAYED_TABLES:
                delete_sql = f"DELETE FROM {table} WHERE tenant_id = %s"  # noqa: S608 (constant)
                cursor.execute(delete_sql, [tenant.pk])

    def apply(self, *, tenant: Tenant, events: Sequence[Event]) -> None:
        batch = _Batch(tenant=tenant, events=events)
        for event in events:
            handler = getattr(self, "_" + event.kind.replace(".", "_"))
            handler(tenant, batch, event, event.payload)
        with transaction.atomic():
            tenant_write_lock(tenant)
            batch.write()

    # --- One method per kind ----------------------------------------------------------------

    def _round_participants_added(
        self, tenant: Tenant, batch: _Batch, event: Event, p: dict[str, Any]
    ) -> None:
        pk = int(p["round_pk"])
        at = _when(p["at"])
        if batch.round(pk) is None:
            batch.rounds[pk] = Round(
                id=pk, tenant=tenant, round_id=p["round_id"], run_id=p["run_id"], created_at=at
            )
        for agent in p["agents"]:
            agent_id = int(agent["id"])
            if agent_id not in self._agents:
                continue
            batch.participants.append(
                RoundParticipant(tenant=tenant, round_id=pk, agent_id=agent_id, joined_at=at)
            )
            self._rounds[agent_id] = self._rounds.get(agent_id, 0) + 1

    def _round_finalized(
        self, tenant: Tenant, batch: _Batch, event: Event, p: dict[str, Any]
    ) -> None:
        round_ = batch.round(int(p["round_pk"]))
        if round_ is None:
            return
        round_.final_output = p["final_output"]
        round_.finalized_at = _when(p["at"])
        round_.finalized_by = event.actor
        _version_append(
            tenant, batch, round_, 1, p["final_output"], p["output_hash"], event.actor, p
        )

    def _round_output_revised(
        self, tenant: Tenant, batch: _Batch, event: Event, p: dict[str, Any]
    ) -> None:
        round_ = batch.round(int(p["round_pk"]))
        if round_ is None:
            return
        _version_append(
            tenant,
            batch,
            round_,
            int(p["version"]),
            p["content"],
            p["content_hash"],
            p["author"],
            p,
        )

    def _dissent_logged(
        self, tenant: Tenant, batch: _Batch, event: Event, p: dict[str, Any]
    ) -> None:
        if int(p["agent_id"]) not in self._agents:
            return
        depth = p["depth"]
        batch.dissents[int(p["dissent_id"])] = Dissent(
            id=int(p["dissent_id"]),
            tenant=tenant,
            agent_id=int(p["agent_id"]),
            round_id=p["round_id"],
            occurred_at=_when(p["occurred_at"]),
            created_at=_when(p["at"]),
            context=p["context"],
            text=p["text"],
            rubric_citations=p["rubric_citations"],
            rubric_version=p["rubric_version"],
            length_score=depth["length"],
            citation_score=depth["citations"],
            novelty=depth["novelty"],
            novelty_known=depth["novelty_known"],
            depth_score=depth["depth"],
            imported=p["imported"],
        )

    def _dissent_impact_set(
        self, tenant: Tenant, batch: _Batch, event: Event, p: dict[str, Any]
    ) -> None:
        dissent = batch.dissent(int(p["dissent_id"]))
        if dissent is not None:
            dissent.impact = p["impact"]
            dissent.feedback_incorporated = p["feedback_incorporated"]
            dissent.impact_set_at = _at(p["at"])

    def _override_logged(
        self, tenant: Tenant, batch: _Batch, event: Event, p: dict[str, Any]
    ) -> None:
        if int(p["agent_id"]) not in self._agents:
            return
        batch.overrides[int(p["override_id"])] = Override(
            id=int(p["override_id"]),
            tenant=tenant,
            agent_id=int(p["agent_id"]),
            round_id=p["round_id"],
            occurred_at=_when(p["occurred_at"]),
            created_at=_when(p["at"]),
            context=p["context"],
            agent_output=p["agent_output"],
            human_decision=p["human_decision"],
            agent_output_hash=text_hash(p["agent_output"]),
            decision_hash=text_hash(p["human_decision"]),
            decided_by=p["decided_by"],
            auto_check_deadline=_when(p["auto_check_deadline"]),
        )

    def _override_reverted(
        self, tenant: Tenant, batch: _Batch, event: Event, p: dict[str, Any]
    ) -> None:
        for override_id in p["override_ids"]:
            override = batch.override(int(override_id))
            if override is not None:
                override.regret = bool(p.get("regret", True))
                override.reverted_by = p["reverted_by"]
                override.reverted_at = _at(p["at"])
                override.revert_reason = p["reason"]
                # Events from before notes existed have none.
                override.revert_note = p.get("note", "")

    def _override_revert_withdrawn(
        self, tenant: Tenant, batch: _Batch, event: Event, p: dict[str, Any]
    ) -> None:
        override = batch.override(int(p["override_id"]))
        if override is not None:
            for name, value in OPEN_OVERRIDE.items():
                setattr(override, name, value)

    def _trust_score_changed(
        self, tenant: Tenant, batch: _Batch, event: Event, p: dict[str, Any]
    ) -> None:
        agent_id = int(p["agent_id"])
        if agent_id not in self._agents:
            return
        batch.changes.append(
            TrustScoreChange(
                id=int(p["change_id"]),
                tenant=tenant,
                agent_id=agent_id,
                at=_when(p["at"]),
                score=p["score"],
                reason=p["reason"],
                components=p["components"],
                # Changes recorded before causes were kept have none.
                cause=p.get("cause", {}),
            )
        )
        self._scores[agent_id] = float(p["score"])

    def _agent_deleted(
        self, tenant: Tenant, batch: _Batch, event: Event, p: dict[str, Any]
    ) -> None:
        """Nothing to undo: the agent is not among those whose rows are replayed (reset)."""

    def _trust_rounds_imported(
        self, tenant: Tenant, batch: _Batch, event: Event, p: dict[str, Any]
    ) -> None:
        self._rounds[int(p["agent_id"])] = int(p["rounds_participated"])

    # ------------------------------------------------------------------------------------------

    def finish(self, *, tenant: Tenant) -> None:
        agent_ids = sorted(self._agents)
        with transaction.atomic(), connection.cursor() as cursor:
            tenant_write_lock(tenant)
            cursor.execute(
                """
                UPDATE ledger_agent a
                SET trust_score = s.score, rounds_participated = s.rounds
                FROM unnest(%s::bigint[], %s::float8[], %s::int[]) AS s(id, score, rounds)
                WHERE a.id = s.id
                  AND (a.trust_score, a.rounds_participated) IS DISTINCT FROM (s.score, s.rounds)
                """,
                [
                    agent_ids,
                    [self._scores.get(a, Agent.DEFAULT_TRUST_SCORE) for a in agent_ids],
                    [self._rounds.get(a, 0) for a in agent_ids],
                ],
            )
            if self._proposal_links:
                cursor.execute(
                    """
                    UPDATE trust_rubricproposal p SET override_id = s.override_id
                    FROM unnest(%s::bigint[], %s::bigint[]) AS s(id, override_id)
                    JOIN trust_override o ON o.id = s.override_id
                    WHERE p.id = s.id
                    """,
                    [[p for p, _ in self._proposal_links], [o for _, o in self._proposal_links]],
                )
            # Rows came back with their own ids: a fresh database's sequences must move past them.
            for table in _REPLAYED_TABLES:
                sequence = f"pg_get_serial_sequence('{table}', 'id')"
                cursor.execute(
                    f"SELECT setval({sequence}, greatest(max(id), nextval({sequence})))"  # noqa: S608
                    f" FROM {table} HAVING max(id) IS NOT NULL"
                )
        self._scores, self._rounds, self._agents, self._proposal_links = {}, {}, set(), []

    def after_append(self, *, event_ids: Sequence[int]) -> None:
        """The trust tables are written by the trust services themselves, not after the fact."""
