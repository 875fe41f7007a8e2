"""Issue mining from exported GitHub data (offline): issue-PR pairs -> SWE-bench-style records.

Input is what the GitHub REST API returns, saved to JSON: issues (``GET /repos/{o}/{r}/issues``; entries with a
``pull_request`` key are pull requests and are skipped as issues) and pull requests (``GET .../pulls``), each
pull request optionally carrying its diff as ``diff`` (text) or its changed files as ``files`` (the
``GET .../pulls/{n}/files`` entries: ``filename``, ``status``, ``patch``, ``previous_filename``). One file may
hold ``{"repo": "o/r", "issues": [...], "pulls": [...]}`` or a plain list of either.

Kept: pull requests that are merged, have a base and a merge commit, and change code (a non-test source file),
linked to issues by GitHub's closing keywords (``fixes #12``, ``closes o/r#12``), one-to-one: the issue is
closed by exactly one such pull request and the pull request closes exactly one issue. The buggy commit is the
pull request's ``base.sha``, the patched commit its ``merge_commit_sha``; the diff is split into ``patch``
(source) and ``test_patch`` (tests). With a model, each record gets a label: does the fix touch an
agent-harness component (tools, orchestration, memory/context, provider integration)?
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, Field

from coharden.config import DEFAULT_TEST_PATTERNS
from coharden.errors import CoHardenError
from coharden.llm.client import LLMClient
from coharden.llm.errors import LLMError, failure_of
from coharden.patches import is_test_path, split_patch
from coharden.schema.instance import Instance

CODE_SUFFIXES = (".py", ".pyx", ".pxd", ".pyi", ".c", ".cc", ".cpp", ".h", ".rs", ".js", ".ts", ".go")
HARNESS_COMPONENTS = ("tools", "orchestration", "memory_context", "provider_integration")
_CLOSING = re.compile(r"\b(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)\s*:?\s+(?:([\w.-]+/[\w.-]+))?#(\d+)\b",
                      re.IGNORECASE)

LABEL_SYSTEM = """\
You classify bug fixes in LLM-agent repositories. Decide whether the fix touches an agent-harness component:
- tools: tool definitions, tool calling, argument parsing, sandbox / shell / file tools
- orchestration: the agent loop, planning, step control, multi-agent coordination, termination
- memory_context: conversation history, context windows, summarization, retrieval, state persistence
- provider_integration: model clients, provider APIs, request/response formats, streaming, retries, costs
Reply with only a JSON object in one ```json block: \
{"agent_harness": true|false, "components": [subset of the names above], "rationale": "one sentence"}."""


class MinedRecord(Instance):
    """A SWE-bench record (an :class:`~coharden.schema.instance.Instance`) plus where it came from: the merged
    pull request and the one issue it closes."""

    python: str | None = Field(default=None, exclude=True)  # chosen when it runs, never mined
    created_at: str | None = None
    patched_commit: str
    pull_number: int
    issue_numbers: list[int]
    pull_url: str | None = None
    harness_label: dict[str, Any] | None = None
    label_error: str | None = None


class MiningResult(BaseModel):
    records: list[MinedRecord] = Field(default_factory=list)
    dropped: dict[str, int] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict)


@dataclass(frozen=True)
class GitHubExport:
    """What exported JSON files hold: the repository they are of (``owner/name``; None: each pull request's
    base repository), its issues and its pull requests, as the GitHub REST API gives them."""

    repo: str | None
    issues: list[dict[str, Any]]
    pulls: list[dict[str, Any]]


def load_export(paths: list[Path]) -> GitHubExport:
    """The repository, issues and pull requests of exported JSON files."""
    repo: str | None = None
    issues: list[dict[str, Any]] = []
    pulls: list[dict[str, Any]] = []
    for path in paths:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise CoHardenError(f"{path}: cannot read exported JSON: {exc}") from exc
        if isinstance(data, dict):
            repo = repo or data.get("repo")
            items = list(data.get("issues", [])) + list(data.get("pulls", []))
        elif isinstance(data, list):
            items = data
        else:
            raise CoHardenError(f"{path}: expected a list or an object with issues / pulls")
        for item in items:
            if not isinstance(item, dict) or "number" not in item:
                raise CoHardenError(f"{path}: every entry needs a number")
            if "merge_commit_sha" in item or "merged_at" in item or "base" in item:
                pulls.append(item)
            elif "pull_request" not in item:
                issues.append(item)
    return GitHubExport(repo, issues, pulls)


def _repo_of(pull: dict[str, Any]) -> str | None:
    return (((pull.get("base") or {}).get("repo") or {}).get("full_name")) or None


def _file_diff(entry: dict[str, Any]) -> str | None:
    """One file of ``GET /pulls/{n}/files`` as a git diff (None when GitHub gave no patch text: binary / large)."""
    name, status, body = entry.get("filename"), entry.get("status", "modified"), entry.get("patch")
    if not name or body is None:
        return None
    old = entry.get("previous_filename") or name
    head = [f"diff --git a/{old} b/{name}\n"]
    if status == "added":
        head += ["new file mode 100644\n", "--- /dev/null\n", f"+++ b/{name}\n"]
    elif status == "removed":
        head += ["deleted file mode 100644\n", f"--- a/{name}\n", "+++ /dev/null\n"]
    else:
        if status == "renamed" and old != name:
            head += [f"rename from {old}\n", f"rename to {name}\n"]
        head += [f"--- a/{old}\n", f"+++ b/{name}\n"]
    return "".join(head) + body.rstrip("\n") + "\n"


def pull_diff(pull: dict[str, Any]) -> tuple[str | None, str]:
    """(diff, problem): the pull request's diff, or None and why not."""
    if isinstance(pull.get("diff"), str) and pull["diff"].strip():
        return pull["diff"], ""
    files = pull.get("files")
    if not isinstance(files, list) or not files:
        return None, "no diff or files in the export"
    parts = []
    for entry in files:
        diff = _file_diff(entry)
        if diff is None:
            return None, f"file {entry.get('filename')} has no patch text (binary or too large)"
        parts.append(diff)
    return "".join(parts), ""


def changes_code(diff: str, patterns: list[str]) -> bool:
    names = re.findall(r"^diff --git a/\S+ b/(\S+)$", diff, re.MULTILINE)
    return any(PurePosixPath(n).suffix in CODE_SUFFIXES and not is_test_path(n, patterns) for n in names)


def linked_issues(pull: dict[str, Any], repo: str | None) -> list[int]:
    text = f"{pull.get('title') or ''}\n{pull.get('body') or ''}"
    found = []
    for match in _CLOSING.finditer(text):
        other = match.group(1)
        if other and repo and other.lower() != repo.lower():
            continue
        found.append(int(match.group(2)))
    return list(dict.fromkeys(found))


def mine(export: GitHubExport, *, patterns: list[str] | None = None, llm: LLMClient | None = None,
         progress: Callable[[str], None] | None = None) -> MiningResult:
    """One-to-one issue-PR pairs of ``export`` as SWE-bench records (see the module docstring)."""
    repo, issues, pulls = export.repo, export.issues, export.pulls
    patterns = patterns or list(DEFAULT_TEST_PATTERNS)
    say = progress or (lambda _msg: None)
    dropped: Counter[str] = Counter()
    by_number = {int(i["number"]): i for i in issues}
    candidates: dict[int, tuple[dict[str, Any], str, list[int]]] = {}
    for pull in pulls:
        number = int(pull["number"])
        pull_repo = repo or _repo_of(pull)
        if not (pull.get("merged_at") or pull.get("merged")):
            dropped["pull not merged"] += 1
            continue
        if not pull.get("merge_commit_sha") or not (pull.get("base") or {}).get("sha"):
            dropped["pull without base or merge commit"] += 1
            continue
        diff, problem = pull_diff(pull)
        if diff is None:
            dropped["pull diff unavailable"] += 1
            say(f"pull #{number}: {problem}")
            continue
        if not changes_code(diff, patterns):
            dropped["pull changes no code"] += 1
            continue
        links = [n for n in linked_issues(pull, pull_repo) if n in by_number]
        if not links:
            dropped["pull closes no exported issue"] += 1
            continue
        candidates[number] = (pull, diff, links)
    closers: Counter[int] = Counter(n for _, _, links in candidates.values() for n in links)
    result = MiningResult()
    for number, (pull, diff, links) in sorted(candidates.items()):
        if len(links) != 1:
            dropped["pull closes several issues"] += 1
            continue
        if closers[links[0]] != 1:
            dropped["issue closed by several pulls"] += 1
            continue
        issue = by_number[links[0]]
        pull_repo = repo or _repo_of(pull) or "unknown/unknown"
        source, tests = split_patch(diff, patterns)
        record = MinedRecord(
            instance_id=f"{pull_repo.replace('/', '__')}-{number}", repo=pull_repo,
            base_commit=pull["base"]["sha"], patch=source, test_patch=tests,
            problem_statement=f"{issue.get('title') or ''}\n\n{issue.get('body') or ''}".strip() + "\n",
            created_at=pull.get("created_at"), environment_setup_commit=pull["base"]["sha"],
            patched_commit=pull["merge_commit_sha"], pull_number=number, issue_numbers=links,
            pull_url=pull.get("html_url"))
        if llm is not None:
            say(f"labelling {record.instance_id}")
            record.harness_label, record.label_error = label_harness(llm, record, pull)
        result.records.append(record)
    result.dropped = dict(dropped)
    result.counts = {"issues": len(issues), "pulls": len(pulls), "records": len(result.records),
                     "labelled": sum(r.harness_label is not None for r in result.records),
                     "label_errors": sum(r.label_error is not None for r in result.records)}
    return result


def label_harness(llm: LLMClient, record: MinedRecord, pull: dict[str, Any]) -> tuple[dict[str, Any] | None,
                                                                                     str | None]:
    """(label, error): the model's harness label, validated; a truncated or malformed reply gives no label
    (fail closed) and the reason."""
    files = re.findall(r"^diff --git a/\S+ b/(\S+)$", record.patch, re.MULTILINE)
    prompt = (f"Issue: {record.problem_statement[:3000]}\n\nPull request: {pull.get('title') or ''}\n\n"
              f"Changed source files: {', '.join(files)}\n\nSource diff:\n```diff\n{record.patch[:8000]}\n```")
    try:
        reply = llm.complete([{"role": "system", "content": LABEL_SYSTEM}, {"role": "user", "content": prompt}],
                             instance_id=record.instance_id)
    except LLMError as exc:
        return None, failure_of(exc).describe()
    match = re.search(r"```(?:json)?\s*\n(.*?)```", reply.content, re.DOTALL)
    text = match.group(1) if match else reply.content[reply.content.find("{"): reply.content.rfind("}") + 1]
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None, "the model's label is not JSON"
    if not isinstance(data, dict) or not isinstance(data.get("agent_harness"), bool):
        return None, "the model's label has no boolean agent_harness"
    components = data.get("components") or []
    if not isinstance(components, list) or any(c not in HARNESS_COMPONENTS for c in components):
        return None, f"the model's components are not a subset of {', '.join(HARNESS_COMPONENTS)}"
    return {"agent_harness": data["agent_harness"], "components": components,
            "rationale": str(data.get("rationale", ""))[:500], "request_hash": reply.request_hash}, None


def write_records(records: list[MinedRecord], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        for record in records:
            handle.write(record.model_dump_json() + "\n")
