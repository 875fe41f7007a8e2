"""A pytest plugin, loaded into the TEST interpreter (which need not have coharden installed), that records
argument -> outcome of chosen functions while tests run, and of up to two calling frames of each. For a runner
that is not pytest (sympy's bin/test, Django's runtests.py) the same recorder starts with the interpreter
(``start``, from the ``sitecustomize`` of :mod:`coharden.mutation.recorder_start`).

Targets come from the JSON file named by COHARDEN_RECORD_TARGETS: [{"file": abs path, "qualname": ...}]. Records go
to COHARDEN_RECORD_OUT as JSON lines: {"qualname", "file", "params", "args_enc", "key", "kind": "return"|"raise",
"value_enc", "type_shape", "shape"}, and for a method "receiver" (``self`` or ``cls``), "receiver_key" and
"receiver_enc" when the receiver is deterministic (a target's own call only, never a caller's: a calling frame's
instance may have changed by then). A calling frame of an outermost target call (inside COHARDEN_RECORD_ROOT) gets
{"kind": "caller", "outcome": "return"|"raise", "callee", "depth", "line", "via" (the file of the frame below it),
and the same argument/value fields}. Only outermost calls are recorded (a recursive function records the input the
test gave it), and only inputs with a safe structural encoding (:mod:`coharden.mutation.recorder_values`; never a
pickle) that decodes to the same value; the key is their repr, or the encoding's digest when the repr holds a memory
address or is long, or the value is an object compared by identity. A value that cannot be encoded is dropped; the
``summary`` record of each function counts the drops by reason ("dropped": {reason: n}, "dropped_types": {type name:
n}).

Per function at most ``_MAX_PER_FUNCTION`` distinct inputs are kept: the first half as they come, and the last half
(a ring of the most recent distinct inputs, written at the session's end). A golden test usually appends its
bug-revealing assertion to an existing test function, so on a test that calls a function hundreds of times the
revealing call is among the last (sympy-12481: ``Permutation([[0, 1], [0, 2]])`` at the end of ``test_args``, the
270th call); keeping only the first calls dropped it. The ``summary`` says how many distinct inputs the cap left
out ("capped": n), so a pool with no revealing input can tell "left out" from "outcomes equal".

COHARDEN_RECORD_PROBE names records of another run (the fixed code's, when this is the buggy code): each return
or raise is called again at the session's end ("probe" records), and an outcome here equal (``==``) to that
run's is written with that run's encoding, so outcomes can be compared by their text.

Size: one file (about 770 lines) because it is the pytest plugin shipped into the test interpreter, where coharden is
not installed: ``recording.py`` copies it beside the value code it imports by name (the encoder, the decoder and the
comparison, each a module of its own), hashes every copied file into the recording's cache key, and the
interpreter imports them there. What is left here is the trace of target calls and of their callers, receivers,
the untouched-argument guard and the probes, which share one session's state (the ``_Recorder``, the last drop's
reason that ``_deterministic`` leaves for its caller): split, they would reach each other's module globals.
"""

from __future__ import annotations

import ast
import atexit
import collections
import json
import os
import re
import sys
import threading
import zlib
from dataclasses import dataclass
from typing import Any

try:
    import pytest
except ImportError:  # a runner that is not pytest (sympy's bin/test, Django's runtests.py): see start()
    pytest = None  # type: ignore[assignment]

try:  # beside the plugin in the test interpreter (recording.py copies it there)
    import coharden_recorder_values as _values  # type: ignore[import-not-found]
except ImportError:  # imported from coharden itself
    from coharden.mutation import recorder_values as _values

_MAX_PER_FUNCTION = 200  # distinct inputs kept per function: the first half and the last half
_HEAD = _MAX_PER_FUNCTION // 2
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a repr's memory address: "<Printer object at 0x7f...>"
_CALLER_DEPTH = 2  # calling frames recorded above each outermost target call
_MAX_RECEIVERS = 2000  # distinct method receivers encoded per session


def _coh_shape(value, level="shape", depth=0):
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


def _receiver(name, value, memo):
    """(``self``/``cls``, repr, encoding) of a method's receiver when deterministic, else None. The receiver is
    part of a method's input (``Contains(x, S).as_set()`` has no other argument), so calls on different
    receivers are different inputs. Taken when the call starts, before the method can change it.

    An instance of a class compared by identity (no ``__eq__`` of its own: an xarray ``DataArrayWeighted``, a
    Django QuerySet, an application object) is never printed (printing some has side effects: a QuerySet
    fetches its rows): it is encoded by its state at every call (its attributes may have changed) and named by
    the encoding's digest. ``memo`` (repr or digest -> result) holds at most ``_MAX_RECEIVERS`` distinct
    receivers a session, and encodes any other repeated receiver once."""
    if not isinstance(value, type) and _values._by_state(value):
        det = _deterministic(value)
        if det is None:
            return None
        if det[0] not in memo:
            if len(memo) >= _MAX_RECEIVERS:
                _dropped("too_many_receivers")
                return None
            memo[det[0]] = (name, *det)
        return memo[det[0]]
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - an odd receiver is not recorded
        _dropped("repr_failed")
        return None
    if text not in memo:
        det = _deterministic(value, text) if len(memo) < _MAX_RECEIVERS else None
        if det is None and len(memo) >= _MAX_RECEIVERS:
            _dropped("too_many_receivers")
        memo[text] = (name, *det) if det is not None else tuple(_LAST_DROP)
    found = memo[text]
    if len(found) == 2:  # why it was not kept, for the caller to count
        _dropped(*found)
        return None
    return found


def _deterministic(value, text=None):
    """(repr, encoding) of ``value`` when deterministic, else None; ``text``: its repr, when known. Why a value
    was not kept is left in ``_LAST_DROP`` for the caller to count."""
    try:
        root = _RECORDER.root if _RECORDER is not None else os.environ.get("COHARDEN_RECORD_ROOT")
        return _values.encoded(value, root, text)
    except _values.Unencodable as exc:
        _dropped(exc.args[0], exc.where())
    except Exception:  # noqa: BLE001 - anything odd means "not deterministic"
        _dropped("encoder_error")
    return None


_LAST_DROP: list = ["", ("", "")]  # why the last value was not kept, and where in it: (attribute path, type)


def _dropped(reason, where=("", "")):
    _LAST_DROP[:] = [reason, where]
_MISSING = object()


class _Untouched:
    """Puts back the attributes the recorder's looking changed on ``values`` (and on the items of a tuple or list
    among them, two levels deep): ``repr``, ``len``, ``==`` and the encoder may fill a value's cache, and the
    test then takes another path than it does unrecorded. sympy-12481: ``repr`` of a ``Permutation`` sets its
    ``_cyclic_form``, so ``test_args``' ``assert p._cyclic_form is None`` failed under the recorder, on the fixed
    code and on the buggy one alike, and the bug-revealing call further down was never made."""

    def __init__(self, *values):
        self.saved = []
        for value in values:
            self._save(value, 0)

    def _save(self, value, depth):
        if value is None or isinstance(value, (bool, int, float, complex, str, bytes, type)) or depth > 2:
            return
        if isinstance(value, (tuple, list)):
            for item in value[:50]:
                self._save(item, depth + 1)
            return
        try:
            names = {name for cls in type(value).__mro__
                     for name in ((cls.__dict__.get("__slots__") or ()) if not isinstance(
                         cls.__dict__.get("__slots__"), str) else (cls.__dict__["__slots__"],))
                     if name not in ("__dict__", "__weakref__")}
            slots = {name: getattr(value, name, _MISSING) for name in names}
            attrs = dict(object.__getattribute__(value, "__dict__")) if hasattr(value, "__dict__") else None
        except Exception:  # noqa: BLE001 - an odd value is left as it is
            return
        self.saved.append((value, slots, attrs))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for value, slots, attrs in self.saved:
            try:
                for name, old in slots.items():
                    now = getattr(value, name, _MISSING)
                    if now is old:
                        continue
                    if old is _MISSING:
                        object.__delattr__(value, name)
                    else:
                        object.__setattr__(value, name, old)
                if attrs is not None:
                    current = object.__getattribute__(value, "__dict__")
                    for name in [n for n in current if n not in attrs]:
                        del current[name]
                    for name, old in attrs.items():
                        if current.get(name, _MISSING) is not old:
                            current[name] = old
            except Exception:  # noqa: BLE001 - what cannot be put back stays
                continue
        return False
@dataclass
class _Call:
    """One finished call of a target (or of a calling frame, with ``extra``: where it called the target): its
    function's key, parameter names and arguments, how it ended (``exc``, else its return ``value``), and what
    was taken when it started (the arguments' shapes, the receiver, the values it could change)."""

    key: tuple
    params: list
    args: tuple | None
    exc: object
    value: object
    shapes: tuple | None = None
    extra: dict | None = None
    receiver: tuple | None = None
    mutable: tuple = ()

    @property
    def outcome(self):
        """The exception the call raised, else the value it returned."""
        return self.exc if self.exc is not None else self.value


def _type_name(value):
    kind = type(value)
    if kind in (tuple, list) and value:  # the args tuple: the first element that is not plain says more
        for item in value:
            if item is not None and type(item) not in (bool, int, float, str, complex, bytes):
                return _type_name(item)
    return f"{getattr(kind, '__module__', '?')}.{kind.__qualname__}"[:120]


class _Recorder:
    def __init__(self, targets: list[dict], out: str) -> None:
        self.targets = {(os.path.realpath(t["file"]), t["qualname"]): t for t in targets}
        self.names = {t["qualname"].rsplit(".", 1)[-1] for t in targets}
        self.out = open(out, "a")  # noqa: SIM115 - closed at session end
        # a process that starts and never ends (crashed, killed) leaves a "start" without its "end"
        self.out.write(json.dumps({"file": "", "qualname": "session", "kind": "start"}) + "\n")
        self.out.flush()
        self.depth: dict[tuple[str, str], int] = {}
        self.pending: dict[int, tuple] = {}
        self.counts: dict[tuple[str, str], int] = {}
        self.seen: set[tuple] = set()  # (qualname, key, receiver repr, kind) or ("outside", path, name)
        self.receivers: dict[str, tuple | None] = {}  # receiver repr -> what _receiver returns
        self.calls: dict[tuple[str, str], int] = {}
        # per function, past the first _HEAD inputs: the most recent distinct ones (ident -> record), written at
        # the session's end, and how many distinct inputs were left out
        self.tail: dict[tuple[str, str], collections.OrderedDict] = {}
        self.capped: dict[tuple[str, str], int] = {}
        self.raised: dict[tuple[str, str], set[str]] = {}
        # shape-only inputs: what the first call of each showed, and those a later call showed otherwise
        self.shape_seen: dict[tuple, tuple] = {}
        self.shape_ambiguous: dict[tuple, tuple[str, str]] = {}  # ident -> (file, qualname)
        root = os.environ.get("COHARDEN_RECORD_ROOT")
        self.root = os.path.realpath(root) if root else None
        # the other code's records (the probe file, read once): inputs to probe at the session's end, and
        # outcomes an equal value is written with the bytes of (_same)
        self.probes: list[dict] = []
        probe = os.environ.get("COHARDEN_RECORD_PROBE")
        if probe:
            with open(probe) as handle:
                self.probes = [json.loads(line) for line in handle if line.strip()]
        self.known: dict[tuple, tuple] = {}  # input -> (encoding, observation) of its outcome on the other code
        self.known_effects: dict[tuple, str] = {}  # input -> encoding of its mutable values after the call there
        for rec in self.probes:
            kind = rec.get("outcome") if rec.get("kind") == "caller" else rec.get("kind")
            ident = (rec["qualname"], rec["key"], rec.get("receiver_key"), kind)
            if rec.get("value_enc"):
                self.known[ident] = (rec["value_enc"], rec.get("value_obs"))
            if rec.get("effects_enc"):
                self.known_effects[ident] = rec["effects_enc"]
        self.dropped: dict[tuple[str, str], dict] = {}  # target or caller -> {(reason, type name): count}
        self.caller_calls: dict[tuple[str, str], int] = {}  # caller -> returns seen
        self.qualnames: dict = {}  # code object -> qualified name (Python < 3.11)
        self.lines: dict[str, dict[int, str]] = {}  # file -> first line of a definition -> qualified name

    def _target(self, frame):
        code = frame.f_code
        if code.co_name not in self.names:
            return None
        key = (os.path.realpath(code.co_filename), self._qualname(code))
        return key if key in self.targets else None

    def _qualname(self, code):
        """``Class.method`` of a code object. Python 3.11+ has it (``co_qualname``); before, a method's code
        knows only its own name, so a target such as ``Quaternion.to_rotation_matrix`` was never matched
        (on the Python 3.9 of sympy's SWE-bench environments no method was ever recorded): the name is read
        from the file's syntax tree by the line the definition starts on (once per file)."""
        qualname = getattr(code, "co_qualname", None)
        if qualname is None:
            qualname = self.qualnames.get(code)
            if qualname is None:
                path = os.path.realpath(code.co_filename)
                if path not in self.lines:
                    self.lines[path] = _definition_lines(path) if self._inside(path) else {}
                qualname = self.lines[path].get(code.co_firstlineno, code.co_name)
                if qualname.rsplit(".", 1)[-1] != code.co_name:
                    qualname = code.co_name
                self.qualnames[code] = qualname
        return qualname.replace(".<locals>", "")

    def _inside(self, path):
        return bool(self.root and path.startswith(self.root + os.sep)) or \
            any(path == target[0] for target in self.targets)

    def global_trace(self, frame, event, arg):
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
        record = depth == 0  # past the cap too: the last inputs are kept (see _keep)
        args = tuple(frame.f_locals.get(p) for p in params) if record else None
        shapes = None
        receiver = None
        mutable: tuple = ()
        if record:
            every = tuple(frame.f_locals.get(p) for p in code.co_varnames[:nargs])
            mutable = _mutable(every)
            with _Untouched(every):
                receiver = _receiver(first, frame.f_locals.get(first), self.receivers) if first else None
                if first and receiver is None:  # recorded without it: the input is the arguments alone
                    self._drop(key, frame.f_locals.get(first), "receiver_")
                shapes = (repr(_coh_shape(every, "type")), repr(_coh_shape(every, "shape")))
            self._watch_callers(frame.f_back, key)
        state: dict = {"exc": None}

        def local(frame, event, arg):
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
                    self._emit(_Call(key, params, args, state["exc"], arg, shapes, receiver=receiver,
                                     mutable=mutable))
            return local

        return local

    def _emit(self, call):
        with _Untouched(call.args, call.outcome):
            self._emit_untouched(call)

    def _emit_untouched(self, call):
        key, params, args, exc, value = call.key, call.params, call.args, call.exc, call.value
        shapes, extra, receiver = call.shapes, call.extra, call.receiver
        det = _deterministic(args)
        if det is None:
            self._drop(key, args)
            self._shape_only(call)
            return
        kind, out = ("raise" if exc is not None else "return"), _deterministic(call.outcome)
        if out is None:
            self._drop(key, call.outcome)
            self._shape_only(call)
            return
        ident = (key[1], det[0], receiver[1] if receiver else None, kind)
        tail = self.tail.get(key)
        if ident in self.seen:
            if tail is not None and ident in tail:  # a repeated input is recent again
                tail.move_to_end(ident)
            return
        self.seen.add(ident)
        enc, obs = _same(self.known.get(ident), out[1], exc if exc is not None else value)
        rec = {"file": key[0], "qualname": key[1], "params": params, "key": det[0], "args_enc": det[1],
               "kind": kind, "value_enc": enc, "value_obs": obs, "value_repr": out[0][:200]}
        if receiver is not None:
            rec["receiver"], rec["receiver_key"], rec["receiver_enc"] = receiver
        if exc is not None:
            rec["exc_type"] = type(exc).__name__
        effects = _effects(call.mutable)  # only for an input not seen before: repeats cost nothing more
        if effects is not None:
            rec["effects_enc"] = _same_encoding(self.known_effects.get(ident), *effects)
        if shapes is not None:
            rec["type_shape"], rec["shape"] = shapes
        if extra:  # a caller: "kind" is "caller", its outcome is "outcome"
            rec.update(extra, outcome=kind, kind="caller")
        self._keep(key, ident, rec)

    def _shape_only(self, call):
        """A call of a target whose values have no safe encoding, kept for narrowed_scope, which needs only
        the arguments' shapes: its input is named by a checksum of the arguments' repr (``key`` "obs:..."), its
        outcome by its observation (``_observe``), and nothing of either reaches a mutant. xarray-4687: ``where``
        on ``DataArray`` values (their repr is data, not a constructor call). A memory address in a repr is
        left out of both (it differs between the two codes' runs: sympy-23262's printer, whose bound ``doprint``
        is an argument), so calls apart only by the objects' identity share an input: one whose calls were seen
        to end otherwise in this run is written as ambiguous at the session's end and never compared. Left out
        when a repr fails."""
        key, exc, shapes = call.key, call.exc, call.shapes
        if shapes is None or call.extra:
            return
        try:
            text = _ADDRESS.sub(" at 0x", repr(call.args))
            shown = _observe(call.outcome)
        except Exception:  # noqa: BLE001 - a repr that fails gives no identity
            return
        ident = (key[1], f"obs:{len(text)}:{zlib.crc32(text.encode()):08x}", None, "shape")
        outcome = ("raise" if exc is not None else "return", shown, type(exc).__name__ if exc is not None else None)
        if ident in self.seen:
            if self.shape_seen.get(ident, outcome) != outcome:
                self.shape_ambiguous[ident] = key
            return
        self.seen.add(ident)
        self.shape_seen[ident] = outcome
        rec = {"file": key[0], "qualname": key[1], "kind": "shape", "key": ident[1],
               "outcome": outcome[0], "value_obs": shown, "type_shape": shapes[0], "shape": shapes[1]}
        if exc is not None:
            rec["exc_type"] = outcome[2]
        self._keep(key, ident, rec)

    def _keep(self, key, ident, rec):
        """Write the first ``_HEAD`` distinct inputs of a function at once; keep the later ones in a ring of the
        ``_MAX_PER_FUNCTION - _HEAD`` most recent (written by ``summary``), counting those it pushes out."""
        count = self.counts.get(key, 0)
        if count < _HEAD:
            self.counts[key] = count + 1
            self.out.write(json.dumps(rec) + "\n")
            self.out.flush()
            return
        tail = self.tail.setdefault(key, collections.OrderedDict())
        tail[ident] = rec
        if len(tail) > _MAX_PER_FUNCTION - _HEAD:
            old, _ = tail.popitem(last=False)
            self.seen.discard(old)  # seen again later, it is a recent input again
            self.capped[key] = self.capped.get(key, 0) + 1

    def _drop(self, key, value, prefix=""):
        """Count a call not recorded because ``value`` (its arguments or outcome) has no safe encoding (with
        ``prefix`` "receiver_": a receiver left out of the call's input)."""
        counts = self.dropped.setdefault(key, {})
        path, inner = _LAST_DROP[1]
        # the value that had no encoding: the one inside the outer value, by its attribute path when known
        name = f"{_type_name(value)}{path}: {inner}"[:160] if path else inner or _type_name(value)
        reason = (prefix + (_LAST_DROP[0] or "unencodable"), name)
        counts[reason] = counts.get(reason, 0) + 1

    def _watch_callers(self, frame, callee):
        """Note up to ``_CALLER_DEPTH`` calling frames (comprehension and lambda frames are passed through) and
        record each one's argument -> outcome when it returns. Frames outside the repository root are noted
        as such, once per function, without arguments."""
        depth = 0
        below = None  # the file of the frame below this one (None right above the target)
        while frame is not None and depth < _CALLER_DEPTH:
            code = frame.f_code
            if code.co_name.startswith("<"):
                frame = frame.f_back
                continue
            depth += 1
            path = os.path.realpath(code.co_filename)
            qualname = self._qualname(code)
            # "via": a frame above a test's is the test runner (sympy's runtests.py lies in the repository)
            where = {"callee": callee[1], "depth": depth, "line": frame.f_lineno, "via": below}
            below = path
            if self.root and not path.startswith(self.root + os.sep):
                ident = ("outside", path, qualname)
                if ident not in self.seen:
                    self.seen.add(ident)
                    self.out.write(json.dumps({"file": path, "qualname": qualname, "kind": "caller",
                                               "outcome": None, "key": None, "value_enc": None,
                                               **where}) + "\n")
                frame = frame.f_back
                continue
            ckey = (path, qualname)
            if frame.f_trace is None and (ckey not in self.targets):
                nargs = code.co_argcount + code.co_kwonlyargcount
                nargs += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)
                params = list(code.co_varnames[:nargs])
                if params and params[0] in ("self", "cls"):
                    # no receiver: this frame started before the target's call and may have changed it since
                    params = params[1:]
                args = tuple(frame.f_locals.get(p) for p in params)
                frame.f_trace = self._caller_trace(ckey, params, args, where)
            frame = frame.f_back

    def _caller_trace(self, key, params, args, where):
        state: dict = {"exc": None}

        def local(frame, event, arg):
            if event == "exception":
                state["exc"] = arg[1]
            elif event == "line" and state["exc"] is not None:
                state["exc"] = None
            elif event == "return":
                self.caller_calls[key] = self.caller_calls.get(key, 0) + 1
                self._emit(_Call(key, params, args, state["exc"], arg, extra=where))
            return local

        return local


    def summary(self):
        """Per function: how many outermost calls were seen, which exception types escaped them, and the
        calls not recorded because a value had no safe encoding (by reason, and by the value's type), and the
        distinct inputs the cap left out ("capped"). The last inputs of each function (its ring) come first."""
        for tail in self.tail.values():
            for rec in tail.values():
                self.out.write(json.dumps(rec) + "\n")
        for ident, key in self.shape_ambiguous.items():
            self.out.write(json.dumps({"file": key[0], "qualname": key[1], "kind": "shape_ambiguous",
                                       "key": ident[1]}) + "\n")
        for key in sorted(set(self.calls) | {k for k in self.dropped if k in self.targets}):
            rec = {"file": key[0], "qualname": key[1], "kind": "summary", "calls": self.calls.get(key, 0),
                   "raised": sorted(self.raised.get(key, ()))}
            if self.capped.get(key):
                rec["capped"] = self.capped[key]
            drops = self.dropped.get(key, {})
            if drops:
                rec["dropped"], rec["dropped_types"] = _tally(drops)
            self.out.write(json.dumps(rec) + "\n")
        # callers (of every target) whose calls went unrecorded: caller_patch says why it has no caller
        for key in sorted(set(self.caller_calls) | {k for k in self.dropped if k not in self.targets}):
            rec = {"file": key[0], "qualname": key[1], "kind": "caller_summary",
                   "calls": self.caller_calls.get(key, 0)}
            drops = self.dropped.get(key, {})
            if drops:
                rec["dropped"], rec["dropped_types"] = _tally(drops)
            self.out.write(json.dumps(rec) + "\n")
        self.out.write(json.dumps({"file": "", "qualname": "session", "kind": "end"}) + "\n")
        self.out.close()


def _tally(drops):
    """({reason: n}, {type name: n}) of {(reason, type name): n}, the 20 most frequent types."""
    reasons: dict = {}
    types: dict = {}
    for (reason, name), n in drops.items():
        reasons[reason] = reasons.get(reason, 0) + n
        types[name] = types.get(name, 0) + n
    top = sorted(types.items(), key=lambda kv: (-kv[1], kv[0]))[:20]
    return reasons, dict(top)


def _observe(value):
    """What is seen of an outcome beyond ``==``: its length and its repr (a checksum). Equal values can still
    behave differently: sympy-15017's fix makes ``len()`` of a rank-0 array 1, and the array compares equal
    either way, so every outcome was judged unchanged and no input bug-revealing."""
    try:
        size = str(len(value))
    except Exception:  # noqa: BLE001 - no length
        size = "-"
    try:
        text = _ADDRESS.sub(" at 0x", repr(value))  # an address differs from run to run
    except Exception:  # noqa: BLE001
        text = ""
    return f"{size}|{zlib.crc32(text.encode()):08x}"


def _mutable(values):
    """The values of a call (receiver first) whose state a call can change: built-in containers, and objects
    compared by identity (``_values._by_state``; an object with an ``==`` of its own, a sympy expression, is
    taken for a value). Their state after the call is part of its outcome (``_effects``)."""
    return tuple(v for v in values if isinstance(v, (list, dict, set, bytearray)) or _values._by_state(v))


def _effects(mutable):
    """(encoding, values) of the state of ``mutable`` after a call, or None (nothing mutable, or no safe encoding).
    A fix can change what a function does to its receiver or arguments and return the same value:
    requests-1142's ``prepare_content_length`` sets ``self.headers`` and returns None; judged by the return
    value alone, no input there was bug-revealing."""
    if not mutable:
        return None
    with _Untouched(mutable):
        det = _deterministic(mutable)
    return (det[1], mutable) if det is not None else None


def _same_encoding(known, payload, value):
    """The other code's encoding ``known`` when it decodes to a value the same as ``value`` (``payload``: its
    encoding here), else ``payload``. Encodings of equal values can differ (a representation that prints a
    cache, or a set's order): text alone would call an unchanged outcome changed."""
    if known is None or known == payload:
        return payload
    try:
        return known if _values.same(_values.decode(known), value) else payload
    except Exception:  # noqa: BLE001 - what cannot be decoded is not the same
        return payload


def _same(known, payload, value):
    """(encoding, observation) of an outcome ``value`` (``payload``: its encoding here): ``known`` (the other
    code's for this input) when it decodes to a value equal to ``value`` (an exception: same type and args)
    that was observed the same there (``_observe``), else this code's own (see ``_same_encoding``)."""
    own = (payload, _observe(value))
    if known is None or known[1] != own[1]:
        return own
    return known if _same_encoding(known[0], payload, value) == known[0] else own


def _definition_lines(path):
    """First line of every function definition in ``path`` (its ``def`` line and each decorator's: a code
    object starts at its first decorator) -> its qualified name ({} when the file cannot be read)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    lines: dict[int, str] = {}

    def walk(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + node.name
                for line in [node.lineno, *(d.lineno for d in node.decorator_list)]:
                    lines.setdefault(line, name)
                walk(node.body, name + ".<locals>.")
            elif isinstance(node, ast.ClassDef):
                walk(node.body, prefix + node.name + ".")

    walk(tree.body, "")
    return lines


_RECORDER: _Recorder | None = None


def _make_recorder():
    targets_file = os.environ.get("COHARDEN_RECORD_TARGETS")
    out = os.environ.get("COHARDEN_RECORD_OUT")
    if not targets_file or not out:
        return None
    with open(targets_file) as handle:
        targets = json.load(handle)
    return _Recorder(targets, out)


def pytest_configure(config):
    global _RECORDER
    if _RECORDER is None:
        _RECORDER = _make_recorder()


def pytest_runtest_call(item):
    if _RECORDER is None or _STARTED[0]:
        yield
        return
    previous = sys.gettrace()
    sys.settrace(_RECORDER.global_trace)
    threading.settrace(_RECORDER.global_trace)
    try:
        yield
    finally:
        sys.settrace(previous)
        threading.settrace(previous)


if pytest is not None:
    pytest_runtest_call = pytest.hookimpl(hookwrapper=True)(pytest_runtest_call)

_STARTED = [False]


def start():
    """Record from now until the interpreter exits, for a runner that is not pytest (sympy's ``bin/test``,
    Django's ``runtests.py``): called by the ``sitecustomize`` that recording puts first on PYTHONPATH, in
    every Python process of the run (sympy's runner re-runs itself in a child with a fixed hash seed; each
    process appends to the records file). Calls made while modules import are recorded too: they are calls
    the tests caused. At exit: the probes, then the summary."""
    global _RECORDER
    if _RECORDER is not None:
        return
    _RECORDER = _make_recorder()
    if _RECORDER is None:
        return
    _STARTED[0] = True
    atexit.register(_finish)
    sys.settrace(_RECORDER.global_trace)
    threading.settrace(_RECORDER.global_trace)


def _finish():
    sys.settrace(None)
    threading.settrace(None)
    if _RECORDER is not None:
        if _RECORDER.probes:
            _probe(_RECORDER.probes)
        _RECORDER.summary()


def _find_function(file, qualname):
    real = os.path.realpath(file)
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.realpath(path) == real:
            obj: Any = module
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

    recorder = _RECORDER
    if recorder is None:  # only a started recorder has probes
        return
    for probe in probes:
        if probe.get("kind") == "caller":  # an outcome to compare with (_same), not an input to call
            continue
        func = _find_function(probe["file"], probe["qualname"])
        method = "." in probe["qualname"]
        if func is None or (method and not (probe.get("receiver_enc") and inspect.isfunction(func))):
            continue  # a method needs its recorded instance (a plain method: not a property or classmethod)
        try:
            params = inspect.signature(func).parameters.values()
        except (TypeError, ValueError):
            continue
        if any(p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
            continue
        try:
            args = _values.decode(probe["args_enc"])
            if method:  # the instance decodes as this (the probed) code's class
                args = (_values.decode(probe["receiver_enc"]), *args)
        except Exception:  # noqa: BLE001
            continue
        mutable = _mutable(args)
        try:
            value, kind = func(*args), "return"
        except Exception as exc:  # noqa: BLE001
            value, kind = exc, "raise"
        effects = _effects(mutable)
        out = _deterministic(value)
        payload, obs = (out[1], _observe(value)) if out else (None, None)
        if payload is not None and kind == probe.get("kind"):
            payload, obs = _same((probe.get("value_enc"), probe.get("value_obs")), payload, value) \
                if probe.get("value_enc") else (payload, obs)
        rec = {"file": probe["file"], "qualname": probe["qualname"], "kind": "probe", "key": probe["key"],
               "receiver_key": probe.get("receiver_key"), "outcome": kind, "value_enc": payload, "value_obs": obs}
        if effects is not None:
            rec["effects_enc"] = _same_encoding(probe.get("effects_enc"), *effects)
        recorder.out.write(json.dumps(rec) + "\n")


def pytest_sessionfinish(session):
    if _RECORDER is not None and _RECORDER.probes and not _STARTED[0]:
        previous = sys.gettrace()
        sys.settrace(None)
        try:
            _probe(_RECORDER.probes)
        finally:
            sys.settrace(previous)


def pytest_unconfigure(config):
    if _RECORDER is not None and not _STARTED[0]:
        _RECORDER.summary()
