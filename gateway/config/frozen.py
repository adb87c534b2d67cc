"""The base of every config model: frozen, and unknown keys are errors. `Name`: how a config
name (an upstream, a route, a profile, a node) may be spelled."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:/@+-]+$")]


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
