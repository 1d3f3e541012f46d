"""Run each method of a benchmark in its own subprocess, so that peak memory (``ru_maxrss``) is that method's."""
from __future__ import annotations

import json
import subprocess
import sys


def run_isolated(script: str, methods, skip: set[str], args: list[str]) -> dict[str, dict]:
    """``{method: result}`` for each method not named in ``skip``: ``python script --one METHOD *args`` prints
    its result as JSON on its last line. faiss methods are skipped, with a line, when faiss is not installed."""
    results = {}
    for name in methods:
        if any(s in name for s in skip):
            continue
        if "faiss" in name:
            try:
                import faiss  # noqa: F401
            except ImportError:
                print(f"{name}: faiss-cpu is not installed, skipped")
                continue
        res = subprocess.run([sys.executable, script, "--one", name, *args], capture_output=True, text=True, check=True)
        results[name] = json.loads(res.stdout.strip().splitlines()[-1])
    return results
