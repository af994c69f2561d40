"""How long does `serve-pipeline --help` take?

Runs the installed console script (next to this interpreter, else on PATH) `--runs` times
after one untimed warm-up run (which fills the OS page cache and Python's bytecode
cache) and prints each wall time, then one JSON line: `help_s_median`, `help_s_min`,
`help_s_max`, `runs`, `goal_s` (0.4 s on 2 cores) and `met`.

    python benchmarks/cli_startup.py [--runs 9]

The command imports only the Typer app and its command signatures; every command imports
what it uses (the store, the servers, numpy, pydantic) when it runs. The unit test
tests/unit/test_cli_imports.py keeps it so.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

GOAL_S = 0.4


def console_script() -> str:
    beside = Path(sys.executable).parent / "serve-pipeline"
    if beside.is_file():
        return str(beside)
    found = shutil.which("serve-pipeline")
    if found is None:
        sys.exit("serve-pipeline is not installed: pip install -e .")
    return found


def time_help(command: str) -> float:
    started = time.perf_counter()
    subprocess.run([command, "--help"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    command = console_script()
    time_help(command)
    times = [time_help(command) for _ in range(args.runs)]
    for number, took in enumerate(times, start=1):
        print(f"run {number}: {took:.3f} s")
    median = statistics.median(times)
    print(json.dumps({"help_s_median": round(median, 3), "help_s_min": round(min(times), 3),
                      "help_s_max": round(max(times), 3), "runs": args.runs,
                      "goal_s": GOAL_S, "met": median <= GOAL_S}))


if __name__ == "__main__":
    main()
