"""What an install leaves in a spec environment's checkout: the editable hooks it registered (removed, so the
job's own checkout is what tests import) and the files it generated there, such as compiled extensions (kept
as the environment's overlay and copied into every job's checkout)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from coharden.execution.git import git

SKIP_OVERLAY = {".git", "build", ".eggs", "__pycache__", ".tox", ".pytest_cache", ".hypothesis", "dist"}


def site_packages(python: Path) -> Path:
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True, timeout=60)
    return Path(out.stdout.strip())


def detach_editable(site: Path, src: Path) -> None:
    """Remove the path hooks an editable install left (the job's checkout must be what is imported)."""
    for hook in [*site.glob("__editable__*.pth"), *site.glob("__editable__*finder.py"), *site.glob("*.egg-link")]:
        hook.unlink()
    for pth in site.glob("*.pth"):
        lines = pth.read_text().splitlines()
        kept = [line for line in lines if not line.strip().startswith(str(src))]
        if kept != lines:
            pth.write_text("\n".join(kept) + "\n")


def collect_overlay(src: Path, overlay: Path) -> Path | None:
    """Copy files the install generated inside the checkout (untracked, ignored or not) to ``overlay``."""
    out = git(["ls-files", "--others", "-z"], src).stdout
    generated = [p for p in out.split("\0") if p and not (set(Path(p).parts) & SKIP_OVERLAY)
                 and ".egg-info" not in p and not p.endswith((".pyc", ".o"))]
    for rel in generated:
        target = overlay / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, target)
    return overlay if generated else None
