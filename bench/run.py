"""`make bench`: runs every benchmark in bench/, each printing its figure against its own anchor,
then the figures again in one table (every line with a ratio or a speedup), with the load."""

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = ["ingest.py", "frontier.py", "frontier_db.py", "desk.py", "scale.py"]


def main() -> int:
    failed = 0
    summary: list[str] = [
        f"load before: {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores"
    ]
    for name in BENCHES:
        path = HERE / name
        if not path.exists():
            print(f"== {name}: not present", flush=True)
            continue
        print(f"== {name}", flush=True)
        done = subprocess.Popen(
            [sys.executable, str(path), *sys.argv[1:]], stdout=subprocess.PIPE, text=True
        )
        assert done.stdout is not None
        summary.append(f"== {name}")
        for line in done.stdout:
            print(line, end="", flush=True)
            if (
                any(word in line for word in ("ratio", "speedup", "anchor", "load "))
                or line[:4].strip().isdigit()
            ):
                summary.append(line.rstrip())
        failed += done.wait() != 0
    summary.append(f"load after: {os.getloadavg()[0]:.2f} (1 min)")
    print("\n== the figures\n" + "\n".join(summary))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
