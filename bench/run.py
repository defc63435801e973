"""`make bench`: runs every benchmark in bench/, each printing its figure against its own anchor."""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = ["ingest.py", "frontier.py", "frontier_db.py", "desk.py"]


def main() -> int:
    failed = 0
    for name in BENCHES:
        path = HERE / name
        if not path.exists():
            print(f"== {name}: not present", flush=True)
            continue
        print(f"== {name}", flush=True)
        failed += subprocess.call([sys.executable, str(path), *sys.argv[1:]]) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
