"""How long does `serve-pipeline --help` take?

Runs the installed console script (next to this interpreter, else on PATH) `--runs` times
after one untimed warm-up run (which fills the OS page cache and Python's bytecode
cache) and prints each wall time and CPU time, then one JSON line: `help_s_median`,
`help_s_min`, `help_s_max`, `help_cpu_s_median` (user + system: what the wall time would be
on an idle core), `load_average_1m`, `runs`, `goal_s` (0.4 s on 2 cores) and `met` (the
median wall time within the goal).

    python benchmarks/cli_startup.py [--runs 9]

The command imports only the Typer app and its command signatures, and Click formats the
help (Typer's Rich help would load Rich's console, markdown, syntax and traceback); every
command imports what it uses (Rich, the store, the servers, numpy, pydantic) when it runs.
The unit test tests/unit/test_cli_imports.py keeps it so.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def time_help(command: str) -> tuple[float, float]:
    """Wall time, and the CPU time (user + system) the command used: on a busy machine
    the wall time includes waiting for a core, the CPU time does not."""
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([command, "--help"], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    command = console_script()
    time_help(command)
    runs = [time_help(command) for _ in range(args.runs)]
    for number, (wall, cpu) in enumerate(runs, start=1):
        print(f"run {number}: {wall:.3f} s wall, {cpu:.3f} s CPU")
    times = [wall for wall, _ in runs]
    median = statistics.median(times)
    verdict = "within" if median <= GOAL_S else "over"
    print(f"median {median:.3f} s wall over {args.runs} runs: {verdict} the {GOAL_S} s goal")
    print(json.dumps({"help_s_median": round(median, 3), "help_s_min": round(min(times), 3),
                      "help_s_max": round(max(times), 3),
                      "help_cpu_s_median": round(statistics.median(c for _, c in runs), 3),
                      "load_average_1m": round(os.getloadavg()[0], 2), "runs": args.runs,
                      "goal_s": GOAL_S, "met": median <= GOAL_S}))


if __name__ == "__main__":
    main()
