"""Typed readers for settings that come from the environment.

Each helper names the variable once and says what an unset or empty value means, so settings.py
reads as a list of decisions rather than string parsing.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path


class ConfigError(RuntimeError):
    """An environment variable holds a value the service cannot use."""


def env_str(name: str, default: str = "") -> str:
    value = os.environ.get(name, "")
    return value if value != "" else default


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return default
    if raw in {"1", "true", "yes", "on"}:
        return True
    if raw in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name} must be a boolean (true/false), got {raw!r}")


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from exc


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if raw == "":
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from exc


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name, "")
    if raw.strip() == "":
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_path(name: str, default: Path, *, base: Path) -> Path:
    """A filesystem path; relative values are taken relative to ``base`` (the project root)."""
    raw = os.environ.get(name, "").strip()
    path = Path(raw) if raw else default
    if not path.is_absolute():
        path = base / path
    return path.resolve()


def env_networks(
    name: str, default: list[str]
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """A comma-separated list of addresses or networks (``10.0.0.0/8``, ``::1``); ``none``
    for an empty list (an empty value means the default)."""
    items = env_list(name, default)
    if [item.lower() for item in items] == ["none"]:
        return ()
    try:
        return tuple(ipaddress.ip_network(item, strict=False) for item in items)
    except ValueError as exc:
        raise ConfigError(f"{name} must list addresses or networks, got {items!r}") from exc


def search_weights(items: list[str]) -> tuple[float, float, float, float]:
    """SEARCH_WEIGHTS: four non-negative numbers (similarity, recency, importance, priority)."""
    try:
        values = tuple(float(item) for item in items)
    except ValueError as exc:
        raise ConfigError(f"SEARCH_WEIGHTS must be four numbers, got {items!r}") from exc
    if len(values) != 4 or any(value < 0 for value in values):
        raise ConfigError(f"SEARCH_WEIGHTS must be four non-negative numbers, got {items!r}")
    return values[0], values[1], values[2], values[3]
