"""Estimated judge cost from litellm's price table, without importing litellm.

``import litellm`` costs seconds; the table it prices with is a JSON file shipped in its wheel, so
we read that file once. Estimates feed metrics and spans only, marked as estimates; the judge record
keeps only costs the provider itself reported.
"""

from __future__ import annotations

import importlib.util
import json
import os
from functools import cache, lru_cache
from typing import Any

from sidecar.scoring.types import JudgeUsage

__all__ = ["estimate_cost_usd", "price_entry"]

_TABLE_FILE = "model_prices_and_context_window_backup.json"


@cache
def _price_table() -> dict[str, dict[str, Any]]:
    spec = importlib.util.find_spec("litellm")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = os.path.join(location, _TABLE_FILE)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                table: dict[str, dict[str, Any]] = json.load(fh)
            return table
    return {}


def price_entry(model: str) -> dict[str, Any] | None:
    """litellm's lookup order, simplified: the full id, then the name without provider prefix."""
    table = _price_table()
    entry = table.get(model)
    if entry is None and "/" in model:
        entry = table.get(model.split("/", 1)[1])
    return entry


@lru_cache(maxsize=256)
def _prices(model: str) -> tuple[float, float, float, float] | None:
    """(input, output, cached input, cache creation) USD per token; every judge call is priced."""
    entry = price_entry(model)
    if entry is None:
        return None
    input_price = float(entry.get("input_cost_per_token") or 0.0)
    output_price = float(entry.get("output_cost_per_token") or 0.0)
    cached_price = float(entry.get("cache_read_input_token_cost") or input_price)
    creation_price = float(entry.get("cache_creation_input_token_cost") or input_price)
    return input_price, output_price, cached_price, creation_price


def estimate_cost_usd(model: str, usage: JudgeUsage | None) -> float | None:
    """Tokens × list price. ``None`` when the model has no price or there is no usage."""
    if usage is None or usage.is_empty:
        return None
    prices = _prices(model)
    if prices is None:
        return None
    input_price, output_price, cached_price, creation_price = prices
    cached = usage.cached_input_tokens or 0
    created = usage.cache_creation_input_tokens or 0
    uncached = max((usage.input_tokens or 0) - cached - created, 0)
    return (
        uncached * input_price
        + cached * cached_price
        + created * creation_price
        + (usage.output_tokens or 0) * output_price
    )
