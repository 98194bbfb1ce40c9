"""The base of every settings section: a typo in a YAML key or an environment variable is an error, not ignored."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")
