"""A tenant's recall settings come with the searched agent, and are never read from a stale copy."""

from __future__ import annotations

import pytest

from ledger.models import Agent, RecallSettings, Tenant

pytestmark = pytest.mark.django_db


def test_settings_loaded_with_the_tenant_cost_no_query(
    tenant, make_agent, django_assert_num_queries
):
    make_agent(tenant, name="Creator1")
    RecallSettings.objects.create(tenant=tenant, default_importance=0.9)
    agent = Agent.objects.select_related("tenant__recall_settings").get(name="Creator1")

    with django_assert_num_queries(0):
        settings = RecallSettings.for_tenant(agent.tenant)

    assert settings.default_importance == 0.9


def test_a_tenant_without_settings_gets_the_defaults_with_no_query(
    tenant, make_agent, django_assert_num_queries
):
    make_agent(tenant, name="Creator1")
    agent = Agent.objects.select_related("tenant__recall_settings").get(name="Creator1")

    with django_assert_num_queries(0):
        settings = RecallSettings.for_tenant(agent.tenant)

    assert settings.pk is None
    assert settings.default_importance == RecallSettings(tenant=tenant).default_importance


def test_a_plain_tenant_reads_them_afresh_each_time(tenant):
    plain = Tenant.objects.get(pk=tenant.pk)
    RecallSettings.objects.create(tenant=tenant, default_importance=0.9)
    assert RecallSettings.for_tenant(plain).default_importance == 0.9

    RecallSettings.objects.filter(tenant=tenant).update(default_importance=0.2)

    assert RecallSettings.for_tenant(plain).default_importance == 0.2
