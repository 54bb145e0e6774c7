"""Shared pydantic base classes: strict at every boundary."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable model that rejects unknown fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Mutable(BaseModel):
    """Model that rejects unknown fields but may be updated in place."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)
