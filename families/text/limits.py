"""Request limits of the text family (serving.yaml `limits.text`, overridable per deployment)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_texts: int = Field(64, ge=1, le=1024, description="Texts per request.")
    max_chars: int = Field(2000, ge=1, le=1_000_000,
                           description="Characters of a text kept before tokenising (never fewer than 16 per token "
                                       "of the model's max length, families/text/preprocess.char_budget): longer "
                                       "texts are cut, classified, and their result says `truncated: true` with "
                                       "the `chars` received. Like Hugging Face pipelines with truncation, but "
                                       "said per result.")
    hard_max_chars: int = Field(1_000_000, ge=1, le=16_777_216,
                                description="Characters per text above which the request is refused (422 "
                                            "text_too_long): the abuse limit. gateway.max_body_bytes (413 "
                                            "payload_too_large) caps the request as a whole. Keep it "
                                            "at or above max_chars (texts in between are refused).")
    max_top_k: int = Field(10, ge=1, description="Cap on top_k labels returned.")

