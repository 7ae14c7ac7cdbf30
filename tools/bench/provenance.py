"""The commit a benchmark measures, recorded with its results so that BENCHMARKS.md can name
the build behind each section (run.py writes it to machine.json; techniques.py and
ablation.py put it in their tables' markdown)."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def commit():
    """HEAD of the repository the benchmark runs from (`lds` is built from its work tree), with
    `+changes` when tracked files differ from it; None when git cannot say."""

    def git(*args):
        # The benchmarks run as root in a checkout another user owns: read it anyway.
        return subprocess.run(["git", "-c", "safe.directory=*", "-C", str(ROOT), *args],
                              capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+changes" if changed else "")


def measured_on(recorded, run):
    """The line under a BENCHMARKS.md heading naming the commit its numbers come from."""
    return f"Measured on commit `{recorded or 'not recorded'}` ({run}).\n"


def recorded_in(markdown: Path):
    """The commit a table written earlier names (its first `measured_on` line), when a table
    is written again from stored runs rather than measured; None without one."""
    marker = "Measured on commit `"
    text = markdown.read_text() if markdown.exists() else ""
    start = text.find(marker)
    if start < 0:
        return None
    start += len(marker)
    end = text.find("`", start)
    recorded = text[start:end] if end > start else ""
    return None if recorded in ("", "not recorded") else recorded
