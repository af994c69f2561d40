"""Memory of a server's whole process tree, measured after warm traffic."""

from __future__ import annotations

import psutil


def process_tree_memory(processes: list[psutil.Process]) -> dict[str, float]:
    """RSS and PSS in MiB summed over the tree; PSS splits shared pages fairly."""
    rss = pss = 0
    pss_known = True
    counted = 0
    for process in processes:
        try:
            info = process.memory_full_info()
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        except psutil.AccessDenied:
            try:
                rss += process.memory_info().rss
                counted += 1
            except psutil.Error:
                pass
            pss_known = False
            continue
        rss += info.rss
        pss_value = getattr(info, "pss", None)
        if pss_value is None:
            pss_known = False
        else:
            pss += pss_value
        counted += 1
    metrics = {"server_rss_mb": rss / 2**20, "server_processes": float(counted)}
    if pss_known and counted:
        metrics["server_pss_mb"] = pss / 2**20
    return metrics
