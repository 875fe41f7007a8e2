"""Find what a test mocks, from its AST, and judge it against the code a fix changes.

A reproduction test may replace model clients and network boundaries (the ``openai`` SDK, ``httpx``, a
project's own ``call_llm`` wrapper), never the code under test. Detected forms::

    mock.patch("pkg.mod.func")            @patch("pkg.mod.func")          mocker.patch("pkg.mod.func")
    mock.patch.object(mod, "func")        mocker.patch.object(Cls, "m")    patch.multiple("pkg.mod", func=...)
    monkeypatch.setattr("pkg.mod.func", v)   monkeypatch.setattr(mod, "func", v)   monkeypatch.delattr(...)
    monkeypatch.setitem(sys.modules, "pkg.mod", v)   patch.dict(sys.modules, {...})   sys.modules["pkg"] = v
    mod.func = fake                        (assignment to an attribute of an imported project module)

Targets are resolved through the test module's imports (``from pkg import mod`` makes ``mod.func`` mean
``pkg.mod.func``). Severity: ``error`` when the target is a symbol the fix changes (or encloses one, or is a
whole module the fix changes); ``ok`` for model-client / network boundaries; ``warning`` for anything else.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel

from coharden import pysource

#: Top-level modules that are model clients or network boundaries: mocking them is what a test should do.
BOUNDARY_MODULES = frozenset({
    "openai", "anthropic", "litellm", "cohere", "mistralai", "groq", "together", "ollama", "google", "vertexai",
    "boto3", "botocore", "langchain_openai", "langchain_anthropic", "langchain_community", "huggingface_hub",
    "transformers", "httpx", "requests", "urllib", "urllib3", "aiohttp", "http", "socket", "ssl", "websockets",
    "websocket", "grpc", "smtplib", "ftplib", "paramiko", "tiktoken"})
#: Names of project functions / attributes that are boundaries (a project's own model or HTTP wrapper).
BOUNDARY_NAME = re.compile(r"llm|openai|anthropic|litellm|client|completion|chat|model_call|call_model|"
                           r"http|request|fetch|download|upload|network|socket|session|api_call|send|url|"
                           r"embedding|tokeni[sz]er", re.IGNORECASE)

_PATCH_NAMES = ("patch", "patch.object", "patch.multiple", "patch.dict")
_MONKEY = ("setattr", "delattr", "setitem", "delitem")


class MockFinding(BaseModel):
    path: str
    line: int
    call: str
    target: str
    severity: Literal["error", "warning", "ok"]
    reason: str


@dataclass
class ProjectIndex:
    """The project's modules and what a fix changes in them."""

    modules: set[str] = field(default_factory=set)  # every importable dotted module of the project
    changed_modules: set[str] = field(default_factory=set)
    changed_symbols: set[str] = field(default_factory=set)  # 'pkg.mod.func', 'pkg.mod.Cls', 'pkg.mod.Cls.meth'

    @property
    def tops(self) -> set[str]:
        return {m.split(".")[0] for m in self.modules}

    def is_project(self, dotted: str) -> bool:
        return dotted.split(".")[0] in self.tops

    def module_of(self, dotted: str) -> str | None:
        """The longest prefix of ``dotted`` that is a project module."""
        parts = dotted.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in self.modules:
                return ".".join(parts[:n])
        return None


def module_names(path: str, source_roots: Iterable[str] = ("src", "lib")) -> list[str]:
    """Dotted names a file can be imported as: 'src/pkg/mod.py' -> ['pkg.mod', 'src.pkg.mod']."""
    if not path.endswith(".py"):
        return []
    parts = list(PurePosixPath(path[:-3]).parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() for p in parts):
        return []
    names = []
    if len(parts) > 1 and parts[0] in set(source_roots):
        names.append(".".join(parts[1:]))
    names.append(".".join(parts))
    return names


def defined_symbols(source: str) -> dict[str, str]:
    """{qualified name: AST dump} of module-level functions, classes and their methods (nested classes too)."""
    try:
        tree = pysource.parse(source)
    except SyntaxError:
        return {}
    out: dict[str, str] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{node.name}"
                out[name] = ast.dump(node, include_attributes=False)
                if isinstance(node, ast.ClassDef):
                    walk(node.body, name + ".")

    walk(tree.body, "")
    return out


def changed_symbols(before: str | None, after: str | None) -> set[str]:
    """Qualified names whose definition differs between ``before`` and ``after`` (added, removed or edited),
    with their enclosing classes."""
    old = defined_symbols(before or "")
    new = defined_symbols(after or "")
    changed = {n for n in set(old) | set(new) if old.get(n) != new.get(n)}
    # an enclosing class counts as changed only through its methods; keep the innermost edits and parents
    return changed | {".".join(n.split(".")[:i]) for n in changed for i in range(1, n.count(".") + 1)}


def _aliases(tree: ast.Module) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    aliases.setdefault(top, top)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def imported_names(source: str) -> list[str]:
    """Dotted names a test module imports (``from a.b import c`` -> 'a.b.c', ``import a.b`` -> 'a.b')."""
    try:
        tree = pysource.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names += [f"{node.module}.{a.name}" if a.name != "*" else node.module for a in node.names]
    return list(dict.fromkeys(names))


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name):
        return aliases.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = _dotted(node.value, aliases)
        return f"{base}[{node.slice.value!r}]" if base else None
    return None


def _string(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _patch_kind(func: str) -> str | None:
    """'patch' / 'patch.object' / ... for mock patchers, 'monkeypatch.setattr' / ... for monkeypatch."""
    for name in sorted(_PATCH_NAMES, key=len, reverse=True):
        if func == name or func.endswith("." + name):
            root = func[: -len(name)].rstrip(".")
            if root in ("", "mock", "unittest.mock", "mocker", "self.mocker") or root.endswith(("mock", "mocker")):
                return name
    parts = func.rsplit(".", 1)
    if len(parts) == 2 and parts[1] in _MONKEY and ("monkeypatch" in parts[0] or parts[0].endswith("mp")):
        return "monkeypatch." + parts[1]
    return None


def _targets(call: ast.Call, kind: str, aliases: dict[str, str]) -> list[str]:
    args = call.args
    first = args[0] if args else next((k.value for k in call.keywords if k.arg == "target"), None)
    if kind == "patch":
        text = _string(first)
        return [text] if text else []
    if kind in ("patch.object", "monkeypatch.setattr", "monkeypatch.delattr"):
        text = _string(first)
        if text is not None and (len(args) == 1 or (kind == "monkeypatch.setattr" and len(args) == 2)) \
                and "." in text:
            return [text]  # monkeypatch.setattr("pkg.mod.name", value)
        owner = _dotted(first, aliases) if first is not None else None
        attr = _string(args[1]) if len(args) > 1 else None
        return [f"{owner}.{attr}"] if owner and attr else []
    if kind == "patch.multiple":
        owner = _string(first) or (_dotted(first, aliases) if first is not None else None)
        return [f"{owner}.{k.arg}" for k in call.keywords if owner and k.arg and k.arg not in ("target",)]
    if kind in ("patch.dict", "monkeypatch.setitem", "monkeypatch.delitem"):
        owner = _dotted(first, aliases) if first is not None else None
        if owner == "sys.modules":
            if kind == "patch.dict" and len(args) > 1 and isinstance(args[1], ast.Dict):
                return [f"sys.modules[{_string(k)!r}]" for k in args[1].keys if _string(k)]
            key = _string(args[1]) if len(args) > 1 else None
            return [f"sys.modules[{key!r}]"] if key else []
    return []


Severity = Literal["error", "warning", "ok"]


def _judge(target: str, index: ProjectIndex, own_module: str, aliases: dict[str, str]) -> tuple[Severity, str]:
    match = re.match(r"^sys\.modules\['([^']+)'\]$", target)
    if match:
        name = match.group(1)
        if index.is_project(name):
            if name in index.changed_modules or any(m.startswith(name + ".") for m in index.changed_modules):
                return "error", f"replaces the module under test {name} in sys.modules"
            return "warning", f"replaces project module {name} in sys.modules"
        if name.split(".")[0] in BOUNDARY_MODULES:
            return "ok", "replaces a model-client / network module"
        return "warning", f"replaces module {name} in sys.modules"
    if own_module and target.startswith(own_module + "."):
        local = target[len(own_module) + 1:].split(".")[0]
        if local in aliases:  # patched where the test imported it: judge what the name is
            target = aliases[local] + target[len(own_module) + 1 + len(local):]
    if target.split(".")[0] in BOUNDARY_MODULES:
        return "ok", "model-client / network boundary"
    if not index.is_project(target):
        return "warning", "mocks something other than a model-client or network boundary"
    hit = sorted(s for s in index.changed_symbols if _same_symbol(target, s, index))
    if hit:
        return "error", f"mocks {hit[0]}, which the fix changes (the code under test)"
    if target in index.changed_modules:
        return "error", f"replaces the whole module under test {target}"
    if BOUNDARY_NAME.search(target.rsplit(".", 1)[-1]):
        return "ok", "project wrapper of a model-client / network boundary"
    module = index.module_of(target)
    if module and module in index.changed_modules:
        return "warning", f"mocks {target} in the module under test (not changed by the fix)"
    return "warning", f"mocks project code {target} outside the fix"


def _same_symbol(target: str, symbol: str, index: ProjectIndex) -> bool:
    """Does the patch target ``target`` (as written, through any module path) name ``symbol`` or enclose it?

    ``symbol`` is qualified by the module that defines it; a target may reach the same object through a package
    that re-exports it (``pkg.func`` for ``pkg.mod.func``), so the symbol's own name is compared as well."""
    if target == symbol or symbol.startswith(target + "."):
        return True
    module = next((m for m in sorted(index.changed_modules, key=len, reverse=True) if symbol.startswith(m + ".")),
                  None)
    if module is None:
        return False
    local = symbol[len(module) + 1:]
    target_module = index.module_of(target)
    if not target_module or not (module == target_module or module.startswith(target_module + ".")):
        return False  # only a package that contains the defining module can re-export the symbol
    rest = target[len(target_module) + 1:]
    return bool(rest) and (rest == local or local.startswith(rest + "."))


def find_mocks(path: str, source: str, index: ProjectIndex) -> list[MockFinding]:
    """Every mock / monkeypatch in a test module with its severity."""
    try:
        tree = pysource.parse(source)
    except SyntaxError:
        return []
    aliases = _aliases(tree)
    names = module_names(path)
    own = names[0] if names else ""
    findings: list[MockFinding] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = _dotted(node.func, aliases) or ""
            kind = _patch_kind(func)
            if kind is None:
                continue
            for target in _targets(node, kind, aliases):
                severity, reason = _judge(target, index, own, aliases)
                findings.append(MockFinding(path=path, line=node.lineno, call=kind, target=target,
                                            severity=severity, reason=reason))
        elif isinstance(node, ast.Assign):
            for target_node in node.targets:
                target = (_dotted(target_node, aliases) if isinstance(target_node, ast.Attribute | ast.Subscript)
                          else None) or ""
                if not target:
                    continue
                if target.startswith("sys.modules[") or (index.is_project(target) and "." in target
                                                         and index.module_of(target)):
                    severity, reason = _judge(target, index, own, aliases)
                    findings.append(MockFinding(path=path, line=node.lineno, call="assignment", target=target,
                                                severity=severity, reason=reason))
    return findings
