"""The per-agent document: export an agent's trust record, import one."""
