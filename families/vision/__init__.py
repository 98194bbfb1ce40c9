"""The vision base: what the image families (detection, pose, segmentation, classification) stand on. Not a family
(configs/families.py does not list it): a library of theirs, so that none of them imports another.

- `decode`: safe image decoding (byte and pixel caps from the header, before any pixel is decoded);
- `letterbox`: letterbox geometry and its inverse, the fitted uint8 items and the runner's padding (network_batch);
- `nms`: capped NMS of YOLO heads (anchors and end-to-end), the runner-side cut, output checks, box agreement;
- `limits`, `manifest`, `schemas`: the fields every image family's limits, manifest record and requests share;
- `runtime`: the runner-side feeds and warm-up sizes of letterboxed families (numpy only);
- `family`: the hooks every image family shares (decode within the limits, raw tensors, letterboxed items);
- `batch`: the offline adapter's decoding of image records into items or error rows.
"""
