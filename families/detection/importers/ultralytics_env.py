"""ultralytics, offline: what every use of it here (the .pt export, the cross-check against its predictor, the
pipeline's training) sets up before its first import. ultralytics and matplotlib are imported inside (the export
extra)."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path


def setup_ultralytics(cache_dir: Path) -> Path:
    """Make ultralytics work offline: env before its first import, fonts where its plotting looks, no auto-install.

    Returns the ultralytics user config dir in use. If ultralytics was imported earlier in this process, its config
    dir is already fixed; the fonts then go there instead.
    """
    cfg = Path(cache_dir) / "ultralytics_cfg"
    if "ultralytics" not in sys.modules:
        os.environ["YOLO_CONFIG_DIR"] = str(cfg)
    os.environ["YOLO_OFFLINE"] = "1"
    os.environ["YOLO_AUTOINSTALL"] = "False"
    os.environ.setdefault("YOLO_VERBOSE", "True")
    import matplotlib

    font = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    import ultralytics.utils as uutils

    user_dir = Path(uutils.USER_CONFIG_DIR)
    user_dir.mkdir(parents=True, exist_ok=True)
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        if not (user_dir / name).is_file():
            shutil.copyfile(font, user_dir / name)
    uutils.AUTOINSTALL = False
    return user_dir
