"""The per-agent document (``memory/<Agent>.json``): ``selectors.agent_export`` reads an agent's
trust record, ``services.agent_import`` writes one through the core's rows and events (so the
core projection, trust.rounds.projection, replays it). Its endpoints are actions of
trust.scores.api.TrustViewSet; the ``trust_export``/``trust_import`` commands call the same.
"""
