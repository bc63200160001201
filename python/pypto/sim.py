"""The simulated NPU backend (`@pypto.jit(backend="sim")`): the report of a simulated run (cycles,
per-pipe busy time and utilisation, bytes per memory path, tile placement) and its timeline as a
Chrome trace. The simulator itself is C++ (src/backends/sim); the model is in docs/npu_sim.md."""
from __future__ import annotations

import json
import os

from . import _C
from .errors import PyptoError

PIPES = _C.sim_pipe_names()  # ("MTE2", "MTE3", "V", "M", "S"): ir::pipe_name


def default_target_text():
    """The built-in NPU target description, in the file format of docs/npu_sim.md."""
    return _C.npu_target_text()


def target_text(target):
    """A jit `sim_target=` value as description text: None (the built-in one, or the file named by
    PYPTO_SIM_TARGET), a path to a file, description text, or a dict {"section.key": value} of
    overrides such as {"machine.cores": 8, "dma.gm_in.bytes_per_cycle": 32}."""
    if target is None or target == "":
        return ""
    if isinstance(target, dict):
        lines = []
        for key, value in target.items():
            section, dot, name = str(key).rpartition(".")
            if not dot:
                raise PyptoError(f"sim_target key {key!r}: expected 'section.key' (e.g. 'machine.cores')")
            if isinstance(value, str):
                value = f'"{value}"'
            elif isinstance(value, (list, tuple)):
                value = "[" + ", ".join(str(v) for v in value) + "]"
            lines.append(f"[{section}]\n{name} = {value}")
        return "\n".join(lines) + "\n"
    if isinstance(target, (str, os.PathLike)):
        text = os.fspath(target)
        if "\n" not in text and "=" not in text:
            try:
                with open(text) as f:
                    return f.read()
            except OSError as e:
                raise PyptoError(f"sim_target: cannot read {text!r}: {e}") from None
        return text
    raise PyptoError(f"sim_target must be a path, description text or a dict, got {type(target).__name__}")


def configure(kernel, target):
    """Give a sim kernel (a _C.Kernel made with backend='sim') its target and turn its timeline on."""
    _C.set_sim_target(kernel, target_text(target))
    _C.set_sim_timeline(kernel, True)


class SimReport:
    """One simulated run: `cycles` end to end, `busy[pipe]` (cycles, summed over cores),
    `utilisation[pipe]` (busy / (cycles x cores used)), `instructions[pipe]`, `bytes[path]`
    ("gm->ub", "ub->gm", "gm->l1", "l1->l0", "l0c->gm"), `memory[name]` = (peak bytes placed,
    capacity), `cores_used`, `micros` (cycles at the target's clock), `spans` (core, pipe, begin,
    end, instruction; begin..end is the time it occupies its pipe), `arrivals` (per span, when its
    result is there: a DMA's data arrives its latency after the pipe is free again) and
    `to_chrome_trace(path)`."""

    def __init__(self, kernel_name, d):
        self.kernel = kernel_name
        self.target = d["target"]
        self.sequence = d["sequence"]
        self.clock_ghz = d["clock_ghz"]
        self.cores = d["cores"]
        self.cores_used = d["cores_used"]
        self.cycles = d["cycles"]
        self.busy = dict(d["busy"])
        self.utilisation = dict(d["utilisation"])
        self.instructions = dict(d["instructions"])
        self.bytes = dict(d["bytes"])
        self.memory = dict(d["memory"])
        self.spans = list(d["spans"])
        self.arrivals = list(d["arrivals"])  # per span: when its result is there (DMA: + latency)
        self.spans_dropped = d["spans_dropped"]

    @property
    def micros(self):
        return self.cycles / (self.clock_ghz * 1e3)

    @property
    def gm_bytes(self):
        """Bytes moved between global memory and the cores, both ways."""
        return sum(n for path, n in self.bytes.items() if path.startswith("gm->") or path.endswith("->gm"))

    def to_chrome_trace(self, path):
        """The timeline (chrome://tracing, ui.perfetto.dev): one track per pipe per core, one span
        per instruction; time in microseconds at the target's clock."""
        us = 1.0 / (self.clock_ghz * 1e3)
        events = []
        tids = {}
        for core, pipe, b, e, what in self.spans:
            tid = tids.setdefault((core, pipe), core * len(PIPES) + PIPES.index(pipe))
            events.append({"name": what.split(" ")[0], "cat": pipe, "ph": "X", "ts": b * us,
                           "dur": max(0, e - b) * us, "pid": 0, "tid": tid, "args": {"instruction": what}})
        for (core, pipe), tid in tids.items():
            events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": tid,
                           "args": {"name": f"core {core} {pipe}"}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": tid,
                           "args": {"sort_index": tid}})
        events.append({"ph": "M", "name": "process_name", "pid": 0, "args": {"name": f"{self.target}: {self.kernel}"}})
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, f)

    def __repr__(self):
        return f"<pypto.SimReport {self.kernel} on {self.target}: {self.cycles} cycles>"

    def __str__(self):
        rows = [f"{self.kernel} on {self.target}: {self.cycles:,} cycles ({self.micros:.2f} us at "
                f"{self.clock_ghz:g} GHz), {self.cores_used} of {self.cores} cores",
                f"{'pipe':<5} {'busy cycles':>12} {'util':>6} {'instr':>8}"]
        for p in PIPES:
            rows.append(f"{p:<5} {self.busy[p]:>12,} {100 * self.utilisation[p]:>5.1f}% {self.instructions[p]:>8,}")
        rows.append("bytes: " + ", ".join(f"{k} {v:,}" for k, v in sorted(self.bytes.items())))
        rows.append("placement: " + ", ".join(f"{k} {u:,}/{c:,}" for k, (u, c) in sorted(self.memory.items())))
        return "\n".join(rows)


def report_of(entry):
    """The SimReport of a compiled entry's last run, or None."""
    d = _C.sim_report(entry.kernel) if entry.backend == "sim" else None
    return SimReport(entry.name, d) if d is not None else None
