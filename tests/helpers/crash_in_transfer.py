"""A coordinator process that SIGKILLs itself in the middle of a local copy.

    crash_in_transfer.py HOME SOURCE_SITE SOURCE_PATH DEST_SITE DEST_PATH

Starts ``move_data`` of a folder on a durable coordinator with no compute sites (state in
``HOME/coordinator.db``, site storage under ``HOME/storage``) and dies once the folder's
first file is in place and the second is partly copied: right after the copy reported that
progress (so the store holds it). Prints ``KILLING <bytes copied> <files done>`` first.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from federation.core.storage import site_storage
from federation.runtime.coordinator import Coordinator
from federation.runtime.store import Store
from federation.transfer import local as local_copy


def main() -> None:
    home = Path(sys.argv[1])
    src_site, src_path, dst_site, dst_path = sys.argv[2:6]
    files = sorted(p for p in (site_storage(src_site, home) / src_path).rglob("*") if p.is_file())
    first_bytes = files[0].stat().st_size
    progress = local_copy._Copy._progress

    def progress_then_die(self: local_copy._Copy) -> None:
        progress(self)  # recorded in the store first
        if self.files == 1 and self.bytes > first_bytes:  # within the second file
            print(f"KILLING {self.bytes} {self.files}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    # the fault, injected in this process only
    local_copy._Copy._progress = progress_then_die  # type: ignore[method-assign]
    coord = Coordinator([], store=Store(home / "coordinator.db"))
    coord.move_data(src_site, src_path, dst_site, dst_path, label="crash test", paths="storage")
    time.sleep(600)
    print("NOT KILLED", flush=True)


if __name__ == "__main__":
    main()
