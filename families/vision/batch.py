"""What the image families' offline adapters (kernel/batch.py's contract) share: each record's encoded image decoded
with the deployment's byte and pixel caps, as the service decodes it (a corrupt, empty or oversized image is an error
row with the service's code, never a stopped job), then made into the family's runner item."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from families.vision.decode import decode_image
from families.vision.limits import ImageLimits
from kernel.batch import Prepared
from kernel.errors import ApiError


class ImageAdapter:
    """`prepare` for a family whose records are images (SOURCE "images"); a subclass says how one decoded image
    becomes its runner item and the state `finish` reads back (`item`)."""

    SOURCE = "images"
    HEAVY_FINISH = False
    limits: ImageLimits

    def item(self, image: np.ndarray, index: int) -> tuple[np.ndarray, Any]:
        """One decoded HxWx3 RGB image -> (its runner item, its state); an ApiError refuses the record."""
        raise NotImplementedError

    def prepare(self, records: Sequence[dict]) -> Prepared:
        out = Prepared(keys=[str(r["key"]) for r in records], states=[None] * len(records))
        lim = self.limits
        for i, record in enumerate(records):
            if record.get("read_error"):
                out.errors[i] = ("unreadable_input", str(record["read_error"]))
                continue
            try:
                item, state = self.item(decode_image(bytes(record["data"]), i, lim.max_image_bytes, lim.max_pixels),
                                        i)
            except ApiError as exc:
                out.errors[i] = (exc.code, exc.message)
                continue
            except Exception as exc:  # noqa: BLE001 - whatever else a decoder raises (a PIL plugin patched in by a
                # library of the same process) is this image's error row: one bad image never stops a job
                out.errors[i] = ("invalid_image", f"could not be decoded: {type(exc).__name__}: {exc}")
                continue
            out.items.append(item)
            out.owners.append(i)
            out.states[i] = state
        return out
