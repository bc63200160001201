"""Evaluates the performance bars of DESIGN.md §5 against one run's records."""


def _find(records, case, impl):
    return next((r for r in records if r["case"] == case and r["impl"] == impl), None)


def _why_not(rec, impl):
    if rec is None:
        return f"{impl}: not run"
    if rec["status"] == "skipped" and rec.get("error"):
        return f"{impl}: {rec['error']}"
    return f"{impl}: {rec['status']}" + (f" ({rec['error']})" if rec.get("error") else "")


class _B:
    """A bar as the worker sent it (a dict), with attribute access."""

    def __init__(self, d):
        self.__dict__.update(d)


def evaluate(case_name, bar, records):
    """-> {"case", "bar", "target", "value", "unit", "met": True/False/None, "why"}.
    met is None when the bar could not be measured (an impl failed or was skipped)."""
    rec = _find(records, case_name, bar.impl)
    res = {"case": case_name, "bar": bar.label, "impl": bar.impl, "target": bar.target,
           "value": None, "unit": "", "met": None, "why": ""}
    if rec is None or rec["status"] != "ok":
        res["why"] = _why_not(rec, bar.impl)
        return res
    if bar.kind in ("vs", "scaling"):
        other = _find(records, case_name, bar.other)
        if other is None or other["status"] != "ok":
            res["why"] = "peer " + _why_not(other, bar.other)
            return res
        res["value"], res["unit"] = other["median_ms"] / rec["median_ms"], "x"
        res["met"] = res["value"] >= bar.target
    elif bar.kind == "peak":
        res["value"], res["unit"] = rec.get("peak_frac"), "of peak"
    elif bar.kind == "bw":
        res["value"], res["unit"] = rec.get("bw_frac"), "of copy bw"
    elif bar.kind == "max_us":
        res["value"], res["unit"] = rec["median_ms"] * 1e3, "us"
        res["met"] = res["value"] <= bar.target
    elif bar.kind == "max_ms":
        res["value"], res["unit"] = rec["median_ms"], "ms"
        res["met"] = res["value"] <= bar.target
    else:
        raise ValueError(f"unknown bar kind {bar.kind}")
    if bar.kind in ("peak", "bw"):
        if res["value"] is None:
            res["why"] = "the machine's limit was not measured"
        else:
            res["met"] = res["value"] >= bar.target
    return res


def evaluate_all(bar_list, records):
    """Every bar (dicts with "case", "kind", "target", "impl", "other", "label"), in suite order.
    Each result is also attached to the record of the impl it judges, under "bars"."""
    out = []
    for d in bar_list:
        bar = _B(d)
        res = evaluate(bar.case, bar, records)
        out.append(res)
        rec = _find(records, bar.case, bar.impl)
        if rec is not None:
            rec.setdefault("bars", []).append(
                {k: res[k] for k in ("bar", "target", "value", "met")})
    return out
