"""What every agent shares: the workspace diff, the JSONL trajectory, and the critic loop at the finish.

The critic loop follows the OpenHands SDK's iterative refinement: at each finish the harness computes the
working-tree diff once, calls ``critic.evaluate(events, git_patch)``, and either accepts, or (while fewer than
``max_iterations`` follow-ups were sent) sends ``critic.get_followup_prompt(result, iteration)`` as the next
user turn, or gives up. A critic that raises is a rejection (fail closed), recorded with the error.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from coharden.config import Settings
from coharden.critic.base import CriticBase, CriticResult
from coharden.critic.context import Mode
from coharden.critic.events import Event, make_event
from coharden.errors import RepoError
from coharden.execution.bwrap import interpreter_dirs
from coharden.execution.environ import untrusted_environment
from coharden.execution.git import git
from coharden.execution.readback import read_text
from coharden.execution.sandbox import Confinement, require_confinement
from coharden.execution.workspace import Workspace, base_objects

TRAJECTORY_FORMAT = "coharden-agent-1"

#: Paths the harness keeps out of the diff (and out of ``git status``) in the throwaway clone.
EXCLUDES = (".coharden/", "__pycache__/", "*.pyc", ".pytest_cache/")


#: The largest file an agent's command may write (RLIMIT_FSIZE) and what it may write in all (the disk watch),
#: the test processes' defaults.
AGENT_MAX_FILE_BYTES = 1024 << 20
AGENT_MAX_DISK_BYTES = 4096 << 20


def agent_confinement(workspace: Workspace, pythons: Sequence[str] = (), *, network: bool = False,
                      readable: Sequence[Path] = (), cache_dir: Path | None = None,
                      allow_weak: bool = False) -> Confinement:
    """The sandbox of an agent's commands, the tests' own: the workspace writable (its ``.git`` too: the agent
    may use git), of the objects it borrows only the base commit's (never the fix's: see
    :func:`~coharden.execution.workspace.base_objects`, packed in ``cache_dir``, default the settings'), the
    interpreters' directories read-only, a private ``$HOME`` and ``/tmp``; nothing of the user's home,
    checkout or stores. ``network`` keeps the host's network (an external agent calling its model);
    ``readable``: more host paths the user shows it (an agent's installation). Where that sandbox cannot be made
    here, :class:`~coharden.errors.CoHardenError` says why, unless ``allow_weak`` (``--allow-weak-sandbox``)."""
    shown = (*(d for p in pythons for d in interpreter_dirs(p)), *readable)
    objects = base_objects(workspace.source, workspace.commit, cache_dir or Settings().cache_dir)
    confine = Confinement(writable=(workspace.root,), readable=tuple(shown), hidden=(workspace.source,),
                          mounts=((objects, workspace.source / ".git" / "objects"),),
                          max_file_bytes=AGENT_MAX_FILE_BYTES, max_disk_bytes=AGENT_MAX_DISK_BYTES,
                          share_network=network)
    require_confinement(network, confine, allow_weak)
    return confine


def agent_environment(pass_env: Sequence[str] = (), **values: str) -> dict[str, str]:
    """The environment of an agent's commands: the host's allow-listed variables and those named in
    ``pass_env`` (never a key otherwise: the output reaches the model), then ``values``."""
    return {**untrusted_environment(pass_env), **values}


def prepare_workspace(root: Path) -> None:
    """Keep harness files and caches out of the agent's ``git status``: add :data:`EXCLUDES` to the clone's
    info/exclude (before the agent runs; :func:`workspace_diff` has its own)."""
    exclude = Path(git(["rev-parse", "--git-path", "info/exclude"], root).stdout.strip())
    if not exclude.is_absolute():
        exclude = root / exclude
    exclude.parent.mkdir(parents=True, exist_ok=True)
    current = exclude.read_text() if exclude.is_file() else ""
    missing = [e for e in EXCLUDES if e not in current.splitlines()]
    if missing:
        exclude.write_text(current + ("" if not current or current.endswith("\n") else "\n")
                           + "\n".join(missing) + "\n")


def workspace_diff(root: Path, base_commit: str, objects: Path | None = None) -> str:
    """The diff from ``base_commit`` to the working tree, new files included, ignored files (and
    :data:`EXCLUDES`) left out.

    git runs here outside any sandbox, so never with the workspace's own ``.git``, which the agent could
    write (a config with a filter or fsmonitor command, hooks): a temporary git directory of coharden's own
    borrows ``objects`` (default: the workspace's object store and the stores it borrows from) and reads the
    working tree. So the agent's own index, HEAD and commits do not matter either (changes it committed are
    part of the diff), and nothing in the workspace changes."""
    with tempfile.TemporaryDirectory(prefix="coharden-diff-") as tmp:
        gitdir = Path(tmp) / "git"
        git(["init", "--quiet", "--bare", str(gitdir)], Path(tmp))
        borrowed = [objects] if objects is not None else _object_stores(root)
        (gitdir / "objects" / "info" / "alternates").write_text("".join(f"{p}\n" for p in borrowed))
        (gitdir / "info").mkdir(exist_ok=True)
        (gitdir / "info" / "exclude").write_text("".join(f"{e}\n" for e in EXCLUDES))
        # an in-tree .gitattributes could name a filter or textconv driver of the user's global config
        (gitdir / "info" / "attributes").write_text("* -filter -ident -working-tree-encoding\n")
        env = {"GIT_DIR": str(gitdir), "GIT_WORK_TREE": str(root), "GIT_INDEX_FILE": str(Path(tmp) / "index"),
               "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
        git(["read-tree", base_commit], root, env=env)
        git(["add", "-A", "--", "."], root, env=env)
        return git(["diff", "--cached", "--no-color", "--no-ext-diff", "--no-textconv", "--no-renames",
                    base_commit], root, env=env).stdout


def _object_stores(root: Path) -> list[Path]:
    """The object store of the clone at ``root`` and those its ``info/alternates`` names (absolute paths)."""
    own = root / ".git" / "objects"
    listed = read_text(own / "info" / "alternates", anchor=root, limit=1 << 16) \
        if (own / "info" / "alternates").is_file() else ""
    return [own, *(Path(line) for line in listed.splitlines() if line.startswith("/"))]


class Trajectory:
    """The event list of one run, mirrored line by line to a JSONL file (flushed per event)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.events: list[Event] = []
        self._file: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("w", encoding="utf-8")

    def emit(self, event: Event) -> Event:
        event = {"seq": len(self.events), **event}
        self.events.append(event)
        if self._file is not None:
            self._file.write(json.dumps(event, default=str) + "\n")
            self._file.flush()
        return event

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read_trajectory(path: Path) -> list[Event]:
    """Events of a JSONL trajectory file."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


class Session:
    """State of one agent run: task prompt, workspace, critic, events, and the outcome once it is known."""

    def __init__(self, *, mode: Mode, workspace: Workspace, critic: CriticBase, trajectory: Trajectory) -> None:
        self.mode = mode
        self.workspace = workspace
        self.critic = critic
        self.trajectory = trajectory
        self.iteration = 0  # follow-ups sent so far
        self.patch = ""
        self.accepted = False
        self.exit_status = ""
        self.error: str | None = None
        self.critic_results: list[CriticResult] = []
        self.started = time.monotonic()

    @property
    def root(self) -> Path:
        return self.workspace.root

    @property
    def events(self) -> list[Event]:
        return self.trajectory.events

    @property
    def done(self) -> bool:
        return bool(self.exit_status)

    def emit(self, event: Event) -> Event:
        return self.trajectory.emit(event)

    def diff(self) -> str:
        self.patch = workspace_diff(self.root, self.workspace.commit, self.workspace.source / ".git" / "objects")
        return self.patch

    def finish(self, submission: str = "") -> str | None:
        """The agent says it is done: evaluate, then return the follow-up prompt, or None when the run ends
        (accepted, rejected for good, or the critic failed)."""
        self.emit(make_event("finish", "agent", exit_status="Submitted", submission=submission,
                             iteration=self.iteration))
        patch = self.diff()
        try:
            result = self.critic.evaluate(list(self.events), patch)
        except Exception as exc:  # fail closed: a broken critic never accepts
            self.stop("CriticError", error=f"{type(exc).__name__}: {exc}")
            return None
        self.critic_results.append(result)
        accepted = self.critic.accepts(result)
        followup = None
        if not accepted and self.iteration < self.critic.max_iterations:
            self.iteration += 1
            followup = self.critic.get_followup_prompt(result, self.iteration)
        self.emit(make_event("critic", "harness", iteration=self.iteration, score=result.score,
                             message=result.message, metadata=result.metadata, accepted=accepted,
                             followup=followup, patch=patch))
        if accepted:
            self.accepted, self.exit_status = True, "Submitted"
        elif followup is None:
            self.exit_status = "CriticRejected"
        return followup

    def stop(self, exit_status: str, *, error: str | None = None, **fields: Any) -> None:
        """The run ended without an accepted submission (limits, a truncated reply, a crash, ...)."""
        if self.done:
            return
        self.exit_status, self.error = exit_status, error
        self.emit(make_event("error" if error else "finish", "harness", exit_status=exit_status, error=error,
                             **fields))
        try:
            self.diff()
        except RepoError as exc:  # the diff is for the record only; the run is rejected either way
            self.error = (error + "; " if error else "") + f"diff failed: {exc}"
