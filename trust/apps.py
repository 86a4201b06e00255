from __future__ import annotations

from django.apps import AppConfig


class TrustConfig(AppConfig):
    name = "trust"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from ledger.jobs import job_register
        from ledger.projections import projection_register
        from trust.rounds.projection import TrustProjection
        from trust.tasks import JOB_SPECS

        projection_register(TrustProjection())
        job_register(*JOB_SPECS)

        # Governance (trust.governance): keep this block last. Its projection is registered after
        # the core's because proposals point at the overrides the core replays, so a full rebuild
        # must have them back first. A pick has no table, so nothing replays it.
        from ledger.projections import service_kinds_register
        from trust.governance.projection import GovernanceProjection
        from trust.governance.services import DEVILS_ADVOCATE_PICKED

        projection_register(GovernanceProjection())
        service_kinds_register(DEVILS_ADVOCATE_PICKED)

        # The dashboards (trust.pages): a reviewer's confirmation of an override is a ledger
        # event no table replays; up --demo fills the trust pages.
        from ledger.demo import demo_seeder_register
        from trust.demo import trust_demo_seed
        from trust.rounds.selectors import OVERRIDE_CONFIRMED

        service_kinds_register(OVERRIDE_CONFIRMED)
        demo_seeder_register("trust", trust_demo_seed)
