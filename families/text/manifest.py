"""What the text family records in a model's manifest: its preprocessing parameters (models/manifest.py
assembles every family's into the manifest schema)."""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class TextPreprocess(BaseModel):
    """Tokenisation parameters (families/text/preprocess.py is the implementation)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["text"] = "text"
    tokenizer_file: str = Field(description="tokenizer.json inside the artifact.")
    max_length: int = Field(gt=1, description="Tokens per text after truncation, special tokens included.")
    pad_token_id: int = Field(ge=0)
    lowercase: bool = Field(description="Informational: the tokenizer.json normaliser already applies it.")


Preprocess = TextPreprocess
