"""Reading the traces a pipeline writes with PYPTO_PIPELINE_TRACE=prefix (one file per rank,
prefix-rank<r>.json: (time, event, micro-batch) with one monotonic clock for all processes).

`summarize(prefix)` gives, per run and rank, the time spent computing, waiting in receives and
sending, and the measured bubble: the share of (ranks x wall time) not spent computing, to set
against GPipe's (S - 1) / (M + S - 1). `stalls` are per message: how long a receiver waited after
the sender had finished sending it (what the transport itself costs, queueing excluded).
`python -m pypto.pipeline_trace prefix` prints the summary.
"""
from __future__ import annotations

import glob
import json
import sys


def _load(prefix):
    ranks = {}
    for path in glob.glob(f"{prefix}-rank*.json"):
        with open(path) as f:
            d = json.load(f)
        ranks[d["rank"]] = d["events"]
    return dict(sorted(ranks.items()))


def _spans(events, begin, end, t0, t1):
    """(start, stop, micro-batch) of each begin..end pair that ends inside [t0, t1], clipped to it
    (a worker starts waiting for a run's first micro-batch before rank 0 starts the run)."""
    out, start = [], None
    for t, ev, m in events:
        if ev == begin:
            start = t
        elif ev == end and start is not None:
            if t0 <= t <= t1:
                out.append((max(start, t0), t, m))
            start = None
    return out


def summarize(prefix):
    ranks = _load(prefix)
    if 0 not in ranks:
        raise FileNotFoundError(f"no trace of rank 0 at {prefix}-rank0.json")
    runs = []
    for t0, t1, _ in _spans(ranks[0], "run", "ran", float("-inf"), float("inf")):
        per_rank = {}
        for r, events in ranks.items():
            comp = _spans(events, "compute", "computed", t0, t1)
            recv = _spans(events, "recv", "received", t0, t1)
            send = _spans(events, "send", "sent", t0, t1)
            per_rank[r] = {"compute": sum(b - a for a, b, _ in comp), "recv_wait": sum(b - a for a, b, _ in recv),
                           "send": sum(b - a for a, b, _ in send), "stage_calls": len(comp)}
        stalls = []
        for r, events in ranks.items():  # messages into rank r: from rank r-1
            src = ranks.get((r - 1) % len(ranks))
            sent = {m: b for a, b, m in _spans(src, "send", "sent", t0, t1)} if src else {}
            for a, b, m in _spans(events, "recv", "received", t0, t1):
                if m in sent:
                    stalls.append(max(0.0, b - max(a, sent[m])))
        wall = t1 - t0
        busy = sum(v["compute"] for v in per_rank.values())
        micro = max((v["stage_calls"] for v in per_rank.values()), default=0)
        s = len(ranks)
        runs.append({"wall": wall, "ranks": per_rank, "bubble": 1.0 - busy / (s * wall) if wall > 0 else 0.0,
                     "gpipe_bubble": (s - 1) / (micro + s - 1) if micro else 0.0, "micro_batches": micro,
                     "stall_median": sorted(stalls)[len(stalls) // 2] if stalls else 0.0,
                     "stall_max": max(stalls, default=0.0), "messages": len(stalls)})
    return runs


def format_runs(runs):
    lines = []
    for i, run in enumerate(runs):
        lines.append(f"run {i}: {run['wall'] * 1e3:.2f} ms, bubble {run['bubble']:.1%} (GPipe: "
                     f"{run['gpipe_bubble']:.1%} at {run['micro_batches']} micro-batches), transfer stall per "
                     f"message median {run['stall_median'] * 1e6:.0f} us, max {run['stall_max'] * 1e6:.0f} us "
                     f"({run['messages']} messages)")
        for r, v in run["ranks"].items():
            lines.append(f"  rank {r}: compute {v['compute'] * 1e3:.2f} ms ({v['stage_calls']} calls), waiting in "
                         f"receives {v['recv_wait'] * 1e3:.2f} ms, sending {v['send'] * 1e3:.2f} ms")
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_runs(summarize(sys.argv[1])))
