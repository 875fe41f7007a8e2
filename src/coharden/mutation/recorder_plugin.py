"""A pytest plugin, loaded into the TEST interpreter (which need not have coharden installed), that records
argument -> outcome of chosen functions while tests run, and of up to two calling frames of each.

Targets come from the JSON file named by COHARDEN_RECORD_TARGETS: [{"file": abs path, "qualname": ...}].
Records go to COHARDEN_RECORD_OUT as JSON lines: {"qualname", "file", "params", "args_pickle", "key",
"kind": "return"|"raise", "value_pickle", "type_shape", "shape"}, and for a method "receiver" (``self`` or
``cls``), "receiver_key" and "receiver_pickle" when the receiver is deterministic (a target's own call
only, never a caller's: a calling frame's instance may have changed by then). A calling frame of an
outermost target call (inside COHARDEN_RECORD_ROOT) gets {"kind": "caller", "outcome": "return"|"raise",
"callee", "depth", "line", and the same argument/value fields}. Only outermost calls are recorded (a
recursive function records the input the test gave it), and only inputs whose key is deterministic: picklable,
equal after a pickle round trip, and with no memory address in their repr.

COHARDEN_RECORD_PROBE names records of another run (the fixed code's, when this is the buggy code): each return
or raise is called again at the session's end ("probe" records), and an outcome here equal (``==``) to that
run's is written with that run's pickle, so outcomes can be compared by their bytes.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import sys
import threading

import pytest

_MAX_PER_FUNCTION = 200
_CALLER_DEPTH = 2  # calling frames recorded above each outermost target call
_MAX_RECEIVERS = 2000  # distinct method receivers pickled per session


def _coh_shape(value, level="shape", depth=0):  # type: ignore[no-untyped-def]
    """The shape of a value: its type name; with ``level`` "shape" also the sign of a real number, the
    length of a sized value, and for a sympy object the type names of its args. Tuples and lists recurse.
    Copied verbatim into narrowed_scope mutants, so the test code computes the same shape as the recorder."""
    kind = type(value).__qualname__
    try:
        if value is None or isinstance(value, bool):
            return kind
        if isinstance(value, (tuple, list)) and (depth == 0 or level == "shape") and depth < 3:
            return (kind, tuple(_coh_shape(v, level, depth + 1) for v in value))
        if level != "shape":
            return kind
        if isinstance(value, (int, float)):
            return (kind, (value > 0) - (value < 0))
        if isinstance(value, (str, bytes, dict, set, frozenset)):
            return (kind, len(value))
        args = getattr(type(value), "args", None)
        if isinstance(args, property):
            inner = value.args
            if isinstance(inner, tuple):
                return (kind, tuple(_coh_shape(a, "type", depth + 1) for a in inner))
    except Exception:  # noqa: BLE001 - an odd value has just its type
        return kind
    return kind


def _receiver(name, value, memo):  # type: ignore[no-untyped-def]
    """(``self``/``cls``, repr, pickle) of a method's receiver when deterministic, else None. The receiver is
    part of a method's input (``Contains(x, S).as_set()`` has no other argument), so calls on different
    receivers are different inputs. Taken when the call starts, before the method can change it.

    An instance compared by identity (no ``__eq__`` of its own: a Django QuerySet, an application object) can
    never equal its pickled copy, so it is skipped before ``repr`` or ``pickle`` run: pickling some of them has
    side effects (a QuerySet fetches its rows). ``memo`` (repr -> result) pickles a repeated receiver once."""
    if not isinstance(value, type) and type(value).__eq__ is object.__eq__:
        return None
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - an odd receiver is not recorded
        return None
    if text not in memo:
        det = _deterministic(value, text) if len(memo) < _MAX_RECEIVERS else None
        memo[text] = (name, *det) if det is not None else None
    return memo[text]


def _deterministic(value, text=None):  # type: ignore[no-untyped-def]
    """(repr, base64 pickle) of ``value`` when deterministic, else None; ``text``: its repr, when known."""
    try:
        text = repr(value) if text is None else text
        if " at 0x" in text or len(text) > 2000:
            return None
        data = pickle.dumps(value, protocol=4)
        if pickle.loads(data) != value:
            return None
        return text, base64.b64encode(data).decode()
    except Exception:  # noqa: BLE001 - anything odd means "not deterministic"
        return None


class _Recorder:
    def __init__(self, targets: list[dict], out: str) -> None:
        self.targets = {(os.path.realpath(t["file"]), t["qualname"]): t for t in targets}
        self.names = {t["qualname"].rsplit(".", 1)[-1] for t in targets}
        self.out = open(out, "a")  # noqa: SIM115 - closed at session end
        self.depth: dict[tuple[str, str], int] = {}
        self.pending: dict[int, tuple] = {}
        self.counts: dict[tuple[str, str], int] = {}
        self.seen: set[tuple] = set()  # (qualname, key, receiver repr, kind) or ("outside", path, name)
        self.receivers: dict[str, tuple | None] = {}  # receiver repr -> what _receiver returns
        self.calls: dict[tuple[str, str], int] = {}
        self.raised: dict[tuple[str, str], set[str]] = {}
        root = os.environ.get("COHARDEN_RECORD_ROOT")
        self.root = os.path.realpath(root) if root else None
        # the other code's records (the probe file, read once): inputs to probe at the session's end, and
        # outcomes an equal value is written with the bytes of (_same)
        self.probes: list[dict] = []
        probe = os.environ.get("COHARDEN_RECORD_PROBE")
        if probe:
            with open(probe) as handle:
                self.probes = [json.loads(line) for line in handle if line.strip()]
        self.known: dict[tuple, str] = {}
        for rec in self.probes:
            kind = rec.get("outcome") if rec.get("kind") == "caller" else rec.get("kind")
            if rec.get("value_pickle"):
                self.known[(rec["qualname"], rec["key"], rec.get("receiver_key"), kind)] = rec["value_pickle"]

    def _target(self, frame):  # type: ignore[no-untyped-def]
        code = frame.f_code
        if code.co_name not in self.names:
            return None
        qualname = getattr(code, "co_qualname", code.co_name).replace(".<locals>", "")
        key = (os.path.realpath(code.co_filename), qualname)
        return key if key in self.targets else None

    def global_trace(self, frame, event, arg):  # type: ignore[no-untyped-def]
        if event != "call":
            return None
        key = self._target(frame)
        if key is None:
            return None
        depth = self.depth.get(key, 0)
        self.depth[key] = depth + 1
        code = frame.f_code
        nargs = code.co_argcount + code.co_kwonlyargcount
        flags = code.co_flags
        nargs += bool(flags & 0x04) + bool(flags & 0x08)  # *args, **kwargs
        params = list(code.co_varnames[:nargs])
        first = params[0] if params and params[0] in ("self", "cls") else None
        if first:
            params = params[1:]
        record = depth == 0 and self.counts.get(key, 0) < _MAX_PER_FUNCTION
        args = tuple(frame.f_locals.get(p) for p in params) if record else None
        receiver = _receiver(first, frame.f_locals.get(first), self.receivers) if record and first else None
        shapes = None
        if record:
            every = tuple(frame.f_locals.get(p) for p in code.co_varnames[:nargs])
            shapes = (repr(_coh_shape(every, "type")), repr(_coh_shape(every, "shape")))
            self._watch_callers(frame.f_back, key)
        state: dict = {"exc": None}

        def local(frame, event, arg):  # type: ignore[no-untyped-def]
            if event == "exception":
                state["exc"] = arg[1]
            elif event == "line" and state["exc"] is not None:
                state["exc"] = None  # handled inside the function
            elif event == "return":
                self.depth[key] -= 1
                if depth == 0:
                    self.calls[key] = self.calls.get(key, 0) + 1
                    if state["exc"] is not None:
                        self.raised.setdefault(key, set()).add(type(state["exc"]).__name__)
                if record:
                    self._emit(key, params, args, state["exc"], arg, shapes, receiver=receiver)
            return local

        return local

    def _emit(self, key, params, args, exc, value, shapes=None, extra=None,  # type: ignore[no-untyped-def]
              receiver=None):
        det = _deterministic(args)
        if det is None:
            return
        if exc is not None:
            kind, out = "raise", _deterministic(exc) or _exc_payload(exc)
        else:
            kind, out = "return", _deterministic(value)
        if out is None:
            return
        ident = (key[1], det[0], receiver[1] if receiver else None, kind)
        if ident in self.seen:
            return
        self.seen.add(ident)
        out = (out[0], _same(self.known.get(ident), out[1], exc if exc is not None else value))
        self.counts[key] = self.counts.get(key, 0) + 1
        rec = {"file": key[0], "qualname": key[1], "params": params, "key": det[0], "args_pickle": det[1],
               "kind": kind, "value_pickle": out[1], "value_repr": out[0][:200]}
        if receiver is not None:
            rec["receiver"], rec["receiver_key"], rec["receiver_pickle"] = receiver
        if exc is not None:
            rec["exc_type"] = type(exc).__name__
        if shapes is not None:
            rec["type_shape"], rec["shape"] = shapes
        if extra:  # a caller: "kind" is "caller", its outcome is "outcome"
            rec.update(extra, outcome=kind, kind="caller")
        self.out.write(json.dumps(rec) + "\n")
        self.out.flush()

    def _watch_callers(self, frame, callee):  # type: ignore[no-untyped-def]
        """Note up to ``_CALLER_DEPTH`` calling frames (comprehension and lambda frames are passed through) and
        record each one's argument -> outcome when it returns. Frames outside the repository root are noted
        as such, once per function, without arguments."""
        depth = 0
        while frame is not None and depth < _CALLER_DEPTH:
            code = frame.f_code
            if code.co_name.startswith("<"):
                frame = frame.f_back
                continue
            depth += 1
            path = os.path.realpath(code.co_filename)
            qualname = getattr(code, "co_qualname", code.co_name).replace(".<locals>", "")
            where = {"callee": callee[1], "depth": depth, "line": frame.f_lineno}
            if self.root and not path.startswith(self.root + os.sep):
                ident = ("outside", path, qualname)
                if ident not in self.seen:
                    self.seen.add(ident)
                    self.out.write(json.dumps({"file": path, "qualname": qualname, "kind": "caller",
                                               "outcome": None, "key": None, "value_pickle": None,
                                               **where}) + "\n")
                frame = frame.f_back
                continue
            ckey = (path, qualname)
            if frame.f_trace is None and (ckey not in self.targets) and \
                    self.counts.get(ckey, 0) < _MAX_PER_FUNCTION:
                nargs = code.co_argcount + code.co_kwonlyargcount
                nargs += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
                params = list(code.co_varnames[:nargs])
                if params and params[0] in ("self", "cls"):
                    # no receiver: this frame started before the target's call and may have changed it since
                    params = params[1:]
                args = tuple(frame.f_locals.get(p) for p in params)
                frame.f_trace = self._caller_trace(ckey, params, args, where)
            frame = frame.f_back

    def _caller_trace(self, key, params, args, where):  # type: ignore[no-untyped-def]
        state: dict = {"exc": None}

        def local(frame, event, arg):  # type: ignore[no-untyped-def]
            if event == "exception":
                state["exc"] = arg[1]
            elif event == "line" and state["exc"] is not None:
                state["exc"] = None
            elif event == "return":
                self._emit(key, params, args, state["exc"], arg, extra=where)
            return local

        return local


    def summary(self):  # type: ignore[no-untyped-def]
        """Per function: how many outermost calls were seen and which exception types escaped them."""
        for key, calls in sorted(self.calls.items()):
            self.out.write(json.dumps({"file": key[0], "qualname": key[1], "kind": "summary", "calls": calls,
                                       "raised": sorted(self.raised.get(key, ()))}) + "\n")
        self.out.close()


def _same(known, payload, value):  # type: ignore[no-untyped-def]
    """``known`` (the other code's pickle of this input's outcome) when it unpickles to a value equal to
    ``value`` (an exception: same type and args), else ``payload``. Pickles of equal values can differ with
    the process's history (a sympy Symbol pickles its cache of derived assumptions): bytes alone would call
    an unchanged outcome changed at random."""
    if known is None or known == payload:
        return payload
    try:
        other = pickle.loads(base64.b64decode(known))
        if isinstance(value, BaseException):
            equal = type(other) is type(value) and other.args == value.args
        else:
            equal = type(other) is type(value) and bool(other == value)
    except Exception:  # noqa: BLE001 - what cannot be compared is not the same
        return payload
    return known if equal else payload


def _exc_payload(exc):  # type: ignore[no-untyped-def]
    # exceptions rarely compare equal after a round trip; keep those whose pickle round trip keeps type and args
    try:
        data = pickle.dumps(exc, protocol=4)
        back = pickle.loads(data)
        if type(back) is type(exc) and back.args == exc.args:
            return repr(exc), base64.b64encode(data).decode()
    except Exception:  # noqa: BLE001
        return None
    return None


_RECORDER: _Recorder | None = None


def pytest_configure(config):  # type: ignore[no-untyped-def]
    global _RECORDER
    targets_file = os.environ.get("COHARDEN_RECORD_TARGETS")
    out = os.environ.get("COHARDEN_RECORD_OUT")
    if not targets_file or not out:
        return
    with open(targets_file) as handle:
        targets = json.load(handle)
    _RECORDER = _Recorder(targets, out)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):  # type: ignore[no-untyped-def]
    if _RECORDER is None:
        yield
        return
    previous = sys.gettrace()
    sys.settrace(_RECORDER.global_trace)
    threading.settrace(_RECORDER.global_trace)
    try:
        yield
    finally:
        sys.settrace(previous)
        threading.settrace(previous)  # type: ignore[arg-type]


def _find_function(file, qualname):  # type: ignore[no-untyped-def]
    real = os.path.realpath(file)
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.realpath(path) == real:
            obj = module
            for part in qualname.split("."):
                obj = getattr(obj, part, None)
                if obj is None:
                    return None
            return obj
    return None


def _probe(probes: list) -> None:
    """Call each function on each probe input (the tests imported its module) and record the outcome, so the
    buggy outcome of an input is known even when the test stopped before reaching it."""
    import inspect

    for probe in probes:
        if probe.get("kind") == "caller":  # an outcome to compare with (_same), not an input to call
            continue
        func = _find_function(probe["file"], probe["qualname"])
        method = "." in probe["qualname"]
        if func is None or (method and not (probe.get("receiver_pickle") and inspect.isfunction(func))):
            continue  # a method needs its recorded instance (a plain method: not a property or classmethod)
        try:
            params = inspect.signature(func).parameters.values()
        except (TypeError, ValueError):
            continue
        if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
            continue
        try:
            args = pickle.loads(base64.b64decode(probe["args_pickle"]))
            if method:  # the instance unpickles as this (the probed) code's class
                args = (pickle.loads(base64.b64decode(probe["receiver_pickle"])), *args)
        except Exception:  # noqa: BLE001
            continue
        try:
            value, kind = func(*args), "return"
        except Exception as exc:  # noqa: BLE001
            value, kind = exc, "raise"
        out = (_deterministic(value) if kind == "return" else (_deterministic(value) or _exc_payload(value)))
        payload = out[1] if out else None
        if payload is not None and kind == probe.get("kind"):
            payload = _same(probe.get("value_pickle"), payload, value)
        _RECORDER.out.write(json.dumps({"file": probe["file"], "qualname": probe["qualname"], "kind": "probe",
                                        "key": probe["key"], "receiver_key": probe.get("receiver_key"),
                                        "outcome": kind, "value_pickle": payload}) + "\n")


def pytest_sessionfinish(session):  # type: ignore[no-untyped-def]
    if _RECORDER is not None and _RECORDER.probes:
        previous = sys.gettrace()
        sys.settrace(None)
        try:
            _probe(_RECORDER.probes)
        finally:
            sys.settrace(previous)


def pytest_unconfigure(config):  # type: ignore[no-untyped-def]
    if _RECORDER is not None:
        _RECORDER.summary()
