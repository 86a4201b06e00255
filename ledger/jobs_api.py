"""GET /api/v1/jobs/: the background jobs' schedule, last runs, next due time and health.

Jobs are global (one decay job sweeps every tenant's memories), so there are no per-tenant rows
to scope: what a tenant's admin sees is the same aggregate status every admin sees, with no
tenant data in it. A run's ``error`` is written tenant-free for that reason (an exception's type,
or "2 hash chain(s) broken"); which tenants and the tracebacks stay in ``JobRun.details``, shown
to the operator in the Django admin only. Admin keys only: the status says how the service runs,
not what an agent needs.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, extend_schema_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from ledger.jobs import job_statuses
from ledger.models import JobRun, Role
from ledger.scoping import TenantScopedViewSet


class JobRunSerializer(serializers.ModelSerializer[JobRun]):
    class Meta:
        model = JobRun
        fields = [
            "status",
            "started_at",
            "finished_at",
            "rows_touched",
            "duration_seconds",
            "error",
            "requeued",
        ]


class JobStatusSerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    task = serializers.CharField()
    description = serializers.CharField()
    schedule = serializers.CharField(help_text="As beat has it, e.g. 'every 5 minutes'.")
    enabled = serializers.BooleanField()
    next_due_at = serializers.DateTimeField(allow_null=True)
    healthy = serializers.BooleanField(
        help_text="False when the job failed (or its worker died) in each of its last 3 runs."
    )
    last_runs = JobRunSerializer(many=True, help_text="Newest first, at most 5.")


# many=False: the answer is one object holding the list, though it comes from a "list" action
# (drf-spectacular would otherwise document it as an array, and clients would expect one).
@extend_schema_serializer(many=False)
class JobListSerializer(serializers.Serializer[Any]):
    results = JobStatusSerializer(many=True)


class JobViewSet(TenantScopedViewSet):
    read_role = Role.ADMIN
    agent_bound_actions: frozenset[str] = frozenset()  # how the service runs: not an agent's
    serializer_class = JobStatusSerializer
    pagination_class = None

    @extend_schema(
        summary="Background jobs: schedule, last runs, next due time, health (admin)",
        responses=JobListSerializer,
    )
    def list(self, request: Request) -> Response:
        # No queryset to narrow by tenant: the statuses are global and carry no tenant data.
        return Response({"results": JobStatusSerializer(job_statuses(), many=True).data})
