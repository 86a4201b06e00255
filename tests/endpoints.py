"""The shape of an entry of the isolation matrix (tests/ledger/test_isolation.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # "{id}" is replaced by the id of the target object
    role: str
    body: dict | None = None
    # What "{id}"/"{seq}" names: "agent", "api_key", "event", "memory" or "kb_document".
    target: str | None = None

    def url(self, ids: dict[str, int]) -> str:
        if self.target is None:
            return self.path
        return self.path.replace("{id}", str(ids[self.target])).replace(
            "{seq}", str(ids[self.target])
        )

    def __str__(self) -> str:
        return f"{self.method} {self.path}"
