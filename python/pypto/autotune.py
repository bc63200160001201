"""Autotuning: pick the fastest of several configurations of a kernel by measured time, and keep
the choice in the kernel cache directory so later processes on the same machine reuse it.

    @pypto.autotune(configs=[{"BLOCK": 32}, {"BLOCK": 64}, {"tiles": {"m": 64, "n": 64, "k": 64}}],
                    key=["n"])
    @pypto.jit
    def kernel(x, out, n, BLOCK=32): ...

A configuration is a dict: the keys that are pypto.jit options (tiles, fusion, parallel,
double_buffer, promote) make a variant of the kernel with those options, the others are passed
as keyword arguments (integer meta-parameters). `@pypto.jit(autotune=True)` tunes the matmul
tile sizes (pypto.profile.default_tile_configs: from the target description).

Tuning key: the kernel (qualified name and source), the arguments' signatures (arrays: dtype and
shape; the arguments named in key=: their values), the configurations, and the CPU (model and
feature flags). Each configuration is built and run once, then timed with `repeats` interleaved
rounds (a change in machine load hits every configuration alike) on copies of the array
arguments (a kernel that writes its inputs does not see its own results); the configuration
with the lowest best-of-rounds time wins (load on a shared machine only ever adds time).
PYPTO_LOG_LEVEL=DEBUG logs the search: each configuration's times, the winner, cache hits."""
from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import sys
import threading

from . import _C
from . import profile as _profile
from .errors import PyptoError
from .jit import JitFunction, arg_key

JIT_OPTIONS = ("tiles", "fusion", "parallel", "double_buffer", "promote")

log = logging.getLogger("pypto.autotune")
if any(os.environ.get(v, "").upper() == "DEBUG" for v in ("PYPTO_LOG_LEVEL", "PYTO_LOG_LEVEL")):
    if not log.handlers:
        _h = logging.StreamHandler(sys.stderr)
        _h.setFormatter(logging.Formatter("[pypto] %(message)s"))
        log.addHandler(_h)
    log.setLevel(logging.DEBUG)


class TuningResult:
    """What an autotuned kernel chose for one key: the winning config, every config's median ms
    (best of the rounds; None when it came from the cache), and whether it came
    from the cache."""

    def __init__(self, config, index, times, from_cache):
        self.config, self.index, self.times, self.from_cache = config, index, times, from_cache

    def __repr__(self):
        src = "from the cache" if self.from_cache else "measured"
        return f"<pypto.TuningResult config={self.config} ({src})>"


class Autotuned:
    """A kernel that tunes itself on first call per key (see the module's docstring)."""

    _pypto_jit = True

    def __init__(self, kernel, configs, key=None, repeats=5):
        if not isinstance(kernel, JitFunction):
            kernel = JitFunction(kernel)
        self.kernel = kernel
        self.__name__ = kernel.__name__
        self.__wrapped__ = kernel.__wrapped__
        self._configs = None if configs is None else [self._check(c) for c in configs]
        self._key_names = list(key or [])
        for n in self._key_names:
            if n not in kernel._names:
                raise PyptoError(f"autotune: key names '{n}', which is not an argument of "
                                 f"'{kernel.__name__}' ({', '.join(kernel._names)})")
        self._repeats = max(1, int(repeats))
        self._variants = {}   # json of the jit options -> JitFunction
        self._chosen = {}     # tuning key -> TuningResult
        self._lock = threading.Lock()
        self.tunings = 0      # how many times this object measured (not counting cache hits)

    @staticmethod
    def _check(c):
        if not isinstance(c, dict) or not c:
            raise PyptoError(f"autotune: each config must be a non-empty dict, got {c!r}")
        return dict(c)

    def configs(self, args):
        if self._configs is not None:
            return self._configs
        return [{"tiles": t} for t in _profile.default_tile_configs(args)]

    # --- the key -----------------------------------------------------------------------------
    def _identity(self):
        fn = self.kernel._func
        try:
            src = inspect.getsource(fn)
        except (OSError, TypeError):
            src = fn.__code__.co_code.hex()
        return f"{fn.__module__}.{fn.__qualname__}\n{src}\n{json.dumps(self.kernel._made_with, default=repr)}"

    def _key(self, bound, configs):
        parts = []
        for name, a in zip(self.kernel._names, bound):
            if name in self._key_names:
                parts.append(repr(a if not hasattr(a, "shape") else tuple(a.shape)))
            else:
                parts.append(repr(arg_key(a)))
        text = "\n".join([self._identity(), *parts, json.dumps(configs, sort_keys=True, default=repr), _C.cpu_key()])
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def _path(self, key):
        d = os.path.join(_C.cache_dir(), "autotune")
        os.makedirs(d, mode=0o700, exist_ok=True)
        return os.path.join(d, key + ".json")

    # --- calling -----------------------------------------------------------------------------
    def _variant(self, config):
        opts = {k: v for k, v in config.items() if k in JIT_OPTIONS}
        name = json.dumps(opts, sort_keys=True)
        v = self._variants.get(name)
        if v is None:
            v = self._variants[name] = self.kernel.with_options(**opts) if opts else self.kernel
        return v, {k: v for k, v in config.items() if k not in JIT_OPTIONS}

    def __call__(self, *args, **kwargs):
        result = self.best_config(*args, **kwargs)
        variant, meta = self._variant(result.config)
        return variant(*args, **{**kwargs, **meta})

    def best_config(self, *args, **kwargs):
        """The TuningResult for these arguments: from memory, from the cache directory, or measured now."""
        bound = self.kernel._bind(args, kwargs)[self.kernel._k0:]
        configs = self.configs(bound)
        key = self._key(bound, configs)
        with self._lock:
            r = self._chosen.get(key)
            if r is None:
                r = self._load(key, configs)
                if r is None:
                    r = self._tune(args, kwargs, configs)
                    self._store(key, r)
                self._chosen[key] = r
        return r

    def _load(self, key, configs):
        path = self._path(key)
        try:
            with open(path) as f:
                data = json.load(f)
            i = int(data["index"])
            if not 0 <= i < len(configs) or json.loads(json.dumps(configs[i])) != data["config"]:
                raise ValueError("stale entry")
        except (OSError, ValueError, KeyError, TypeError):
            log.debug("autotune %s: no cached choice (%s)", self.__name__, path)
            return None
        log.debug("autotune %s: cached choice %s from %s", self.__name__, configs[i], path)
        return TuningResult(configs[i], i, None, True)

    def _store(self, key, r):
        path = self._path(key)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            json.dump({"kernel": self.__name__, "index": r.index, "config": r.config, "ms": r.times}, f,
                      default=repr)
        os.replace(tmp, path)
        log.debug("autotune %s: stored the choice in %s", self.__name__, path)

    def _tune(self, args, kwargs, configs):
        self.tunings += 1
        log.debug("autotune %s: timing %d configs, %d rounds", self.__name__, len(configs), self._repeats)
        runs = []
        for c in configs:
            variant, meta = self._variant(c)
            call_args, call_kwargs = _copies(args), {**_copies(kwargs), **meta}
            try:
                variant(*call_args, **call_kwargs)  # build and warm
            except PyptoError as e:
                log.debug("autotune %s: config %s failed: %s", self.__name__, c, str(e).splitlines()[0])
                runs.append(None)
                continue
            runs.append((variant, call_args, call_kwargs))
        if all(r is None for r in runs):
            raise PyptoError(f"autotune '{self.__name__}': every config failed to build or run: {configs}")
        times = [[] for _ in configs]
        bar = _progress(self._repeats * sum(r is not None for r in runs), self.__name__)
        for _ in range(self._repeats):
            for i, r in enumerate(runs):
                if r is None:
                    continue
                variant, a, kw = r
                variant(*a, **kw)
                times[i].append(_profile.get_last_profile().run_ms)
                if bar is not None:
                    bar.update(1)
        if bar is not None:
            bar.close()
        # The best of the rounds: on a shared machine, load only ever adds time.
        med = [min(t) if t else None for t in times]
        for c, m, t in zip(configs, med, times):
            log.debug("autotune %s: %s -> %s ms (runs: %s)", self.__name__, c,
                      "failed" if m is None else f"{m:.4f}", ", ".join(f"{x:.4f}" for x in t))
        best = min((i for i, m in enumerate(med) if m is not None), key=lambda i: med[i])
        log.debug("autotune %s: chose %s (%.4f ms)", self.__name__, configs[best], med[best])
        return TuningResult(configs[best], best, med, False)

    def lower(self, *args, **kwargs):
        r = self.best_config(*args, **kwargs)
        variant, meta = self._variant(r.config)
        return variant.lower(*args, **{**kwargs, **meta})

    def __repr__(self):
        return f"<pypto.autotune of {self.kernel!r}>"


def _copies(obj):
    """The array arguments copied (tuning runs must not change the caller's arrays)."""
    if isinstance(obj, dict):
        return {k: _copies(v) for k, v in obj.items()}
    if isinstance(obj, (tuple, list)):
        return type(obj)(_copies(v) for v in obj)
    if hasattr(obj, "clone") and hasattr(obj, "data_ptr"):
        return obj.clone()
    if hasattr(obj, "__array_interface__"):
        return obj.copy()
    return obj


def _progress(total, name):
    """A tqdm bar on stderr while tuning, when stderr is a terminal and tqdm is installed."""
    if not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=f"autotune {name}", leave=False)


def autotune(kernel=None, *, configs=None, key=None, repeats=5):
    """Tune a kernel over `configs` by measured time (see pypto.autotune's module docs):

        fast = pypto.autotune(kernel, configs=[{"tiles": {"m": 32, "n": 32, "k": 32}}, ...])
        @pypto.autotune(configs=[{"BLOCK": 16}, {"BLOCK": 64}], key=["n"])
        @pypto.jit
        def k(x, n, BLOCK=16): ...
    """
    if configs is not None and not configs:
        raise PyptoError("autotune: configs is empty")
    if kernel is None:
        return lambda k: Autotuned(k, configs, key, repeats)
    return Autotuned(kernel, configs, key, repeats)
