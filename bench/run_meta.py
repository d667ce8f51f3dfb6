"""What the comparison scripts (decode_compare.py, prefill_compare.py) stamp on a run's
results: a short GPU name for the file names and the commit that was measured."""
import os
import re
import subprocess


def gpu_tag(name):
    """"NVIDIA H100 80GB HBM3" -> "h100", "NVIDIA H200" -> "h200"; "gpu" when no model
    number is found (the files must not claim a GPU the run did not use)."""
    m = re.search(r"\b([A-Z]+\d+)\b", name.replace("NVIDIA", ""))
    return m.group(1).lower() if m else "gpu"


def commit():
    """FLASHPAGE_COMMIT (set by device_run.sh from the carried build), else git's HEAD."""
    c = os.environ.get("FLASHPAGE_COMMIT", "")
    if c:
        return c
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001 - no git there: say so in the results
        return "unknown"
