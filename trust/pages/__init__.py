"""The trust dashboards: overview, agent page, review queue and their actions."""
