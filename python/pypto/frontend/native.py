"""Tracing a kernel by running it: for a function the statement walker cannot read (a decorated
forward, *args / **kwargs in its signature, while / try / with or nested definitions in its body:
Hugging Face's models have all of them), Python runs the body itself with traced tensors as
arguments, as it already runs every module and function a walked kernel calls. Each torch call on
a traced tensor records its operations the same way; Python-level control flow runs once, at
trace time, so a branch on a tensor's data is an error, as in a walked kernel. An error names the
innermost line of the user's code (not PyPTO's, not torch's) that raised it."""
from __future__ import annotations

import ast
import os
import sys
import traceback

from ..errors import KernelSourceError, PyptoError, format_location
from ..interop import is_array
from .signals import NeedsConcrete, Restart

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Statements the walker refuses (walker._UNSUPPORTED_STMT): their presence makes a kernel native.
_UNWALKABLE = (ast.While, ast.Try, ast.With, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Global,
               ast.Nonlocal) + tuple(getattr(ast, n) for n in ("Match", "TryStar") if hasattr(ast, n))


def native_reason(func, fdef, signature, module):
    """Why `func` must run natively rather than be walked, or None when the walker reads it. A
    decorated function or star-args in the signature always; statements the walker refuses only
    in an nn.Module's forward (`module`): in a kernel written for PyPTO they stay errors, since
    its loops would be unrolled at trace time instead of becoming loops of the program."""
    if getattr(func, "__wrapped__", None) is not None:
        return "a decorated function"
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values()):
        return "*args / **kwargs in its signature"
    if fdef is None or not module:
        return None
    for stmt in fdef.body:
        for node in ast.walk(stmt):
            if isinstance(node, _UNWALKABLE):
                return f"a {type(node).__name__} statement"
    return None


def run_native(tr, src, signature, bound, args_paths):
    """Calls the kernel's function with the bound (traced) arguments; returns its result and a
    function that undoes what the call assigned into its arguments (to run once the result is
    described: a cache object it updated holds the traced tensors until then). `args_paths` lists
    (argument, Path) of the call's arguments: arrays held inside them (a dict of extra keywords,
    a key/value cache object) become kernel inputs read afresh at each call."""
    restore, snapshots = [], []
    for value, path in args_paths:
        _note_nested(tr, value, path, 0, set(), restore, snapshots)

    def undo():
        for f in reversed(restore):
            f()
    try:
        result = _call(tr, src, signature, bound)
    except BaseException:
        undo()
        raise
    return result, undo, _effects(snapshots)


def _effects(snapshots):
    """What the call assigned into its arguments: (reader of the container from a call's
    arguments, "attr" or "item", key, new value) per changed attribute or dict entry, to be done
    again at every call (trace.rebuild) on that call's own objects."""
    out = []
    for container, path, saved in snapshots:
        now, kind = (container, "item") if isinstance(container, dict) else (vars(container), "attr")
        for k, v in list(now.items()):
            if k not in saved or saved[k] is not v:
                out.append((path.reader(), kind, k, v))
    return out


_MAX_DEPTH = 8


def _note_nested(tr, value, path, depth, seen, restore, snapshots):
    """Registers the path of every array and object inside `value` (dicts, lists, tuples, plain
    objects' attributes; modules have theirs, tracer.note_module_tensors), remembers how to put
    back each container's contents, and snapshots dicts' and objects' entries (_effects)."""
    if depth > _MAX_DEPTH or id(value) in seen or value is None or isinstance(value, (str, bytes, int, float)):
        return
    seen.add(id(value))
    if is_array(value):
        if tr.path_of(value) is None:
            tr.paths[id(value)] = (value, path)
            tr._keep.append(value)
        return
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.nn.Module):
        return
    if isinstance(value, dict):
        items = list(value.items())
        restore.append(lambda d=value, saved=dict(items): (d.clear(), d.update(saved)))
        snapshots.append((value, path, dict(items)))
    elif isinstance(value, (list, tuple)):
        items = list(enumerate(value))
        if isinstance(value, list):
            restore.append(lambda lst=value, saved=list(value): lst.__setitem__(slice(None), saved))
    elif hasattr(value, "__dict__") and not isinstance(value, type) and not callable(value):
        if tr.path_of(value) is None:  # an object the result may hold: updated in place (trace.rebuild)
            tr.paths[id(value)] = (value, path)
        items = list(vars(value).items())
        restore.append(lambda o=value, saved=dict(items): (vars(o).clear(), vars(o).update(saved)))
        snapshots.append((value, path, dict(items)))
        for k, v in items:
            _note_nested(tr, v, path.child(("attr", k), v), depth + 1, seen, restore, snapshots)
        return
    else:
        return
    for k, v in items:
        _note_nested(tr, v, path.child(("item", k), v), depth + 1, seen, restore, snapshots)


def user_call(signature, bound):
    """(args, kwargs) calling a function as a user would, from its bound parameters: the first
    (self) and positional-only ones by position, the rest by name, **kwargs spread, and those
    left at their default not at all, so a decorator's wrapper(self, *args, **kwargs) fills them
    in as it would (Hugging Face's take use_cache, output_attentions and the like from the
    model's config)."""
    args, kwargs = [], {}
    for i, (name, p) in enumerate(signature.parameters.items()):
        if name not in bound:
            continue
        v = bound[name]
        if p.kind == p.VAR_KEYWORD:
            kwargs.update(v)
        elif p.kind == p.POSITIONAL_ONLY or (i == 0 and p.kind == p.POSITIONAL_OR_KEYWORD):
            args.append(v)
        elif p.default is p.empty or v is not p.default:
            kwargs[name] = v
    return args, kwargs


def _call(tr, src, signature, bound):
    args, kwargs = user_call(signature, bound)
    tr.cur_stmt = (src, src.fdef)  # run-time checks name the function's first line
    tr.b.set_location(f"{src.filename}:{src.lineno(src.fdef)}: {src.line_text(src.fdef).strip()}")
    try:
        return src.func(*args, **kwargs)
    except (Restart, NeedsConcrete, KernelSourceError):
        raise
    except RecursionError:
        raise KernelSourceError(_where(src, None, "recursion too deep while tracing")) from None
    except PyptoError as e:
        raise KernelSourceError(_where(src, e.__traceback__, str(e))) from None
    except Exception as e:  # noqa: BLE001 - every failure must name a line of the user's code
        raise KernelSourceError(_where(src, e.__traceback__, f"{type(e).__name__}: {e}")) from e


def _where(src, tb, message):
    """The message at the innermost frame of the traceback in the user's code: not PyPTO's, not
    torch's own (a torch module's line is the user's module call that reached it)."""
    frames = [f for f in traceback.extract_tb(tb) if _users(f.filename)] if tb is not None else []
    if not frames:
        return src.where(src.fdef, message)
    f = frames[-1]
    return format_location(f.filename, f.lineno, f.line or "", message)


def _users(filename):
    path = os.path.abspath(filename)
    if path.startswith(_PACKAGE + os.sep):
        return False
    parts = path.split(os.sep)
    return not ("site-packages" in parts and "torch" in parts[parts.index("site-packages") + 1:][:1])


def signature_names(signature):
    """The parameters a call binds, in order: the named ones, then a **kwargs parameter (its value
    the dict of the call's extra keywords; *args takes no values)."""
    params = signature.parameters.values()
    return [p.name for p in params if p.kind != p.VAR_POSITIONAL]

