"""scripts/drills/server.pin_threads: every thread of a process moves, not only its main thread."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from scripts.drills.server import pin_threads


def test_pin_threads_moves_every_thread_of_the_process():
    code = "import threading, time\nt = threading.Thread(target=time.sleep, args=(30,)); t.start(); t.join()"
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 10
        while len(os.listdir(f"/proc/{proc.pid}/task")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        tids = [int(t) for t in os.listdir(f"/proc/{proc.pid}/task")]
        assert len(tids) >= 2
        assert pin_threads([proc.pid, 999_999_999], {0}) == len(tids)  # a process that is gone is skipped
        assert all(os.sched_getaffinity(tid) == {0} for tid in tids)
    finally:
        proc.kill()
        proc.wait(timeout=10)
