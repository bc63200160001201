"""The suite's output: the results table, the bars table, the machine summary (text and
Markdown) and a PNG chart (matplotlib, Agg backend: no display needed)."""


def _fmt(x, spec, dash="-"):
    return dash if x is None else format(x, spec)


def _time(rec):
    if rec.get("median_ms") is None:
        return "-"
    if rec.get("median_us") is not None:
        return f"{rec['median_us']:.2f} us"
    ms = rec["median_ms"]
    return f"{ms:.3f} ms" if ms < 10 else f"{ms:.1f} ms"


def _hw(rec):
    if rec.get("peak_frac") is not None:
        return f"{rec['peak_frac'] * 100:.0f}% FMA"
    if rec.get("bw_frac") is not None:
        return f"{rec['bw_frac'] * 100:.0f}% BW"
    return "-"


def _vs(rec):
    """For PyPTO rows: speedup over each peer; for peers: the check's relative error."""
    if rec["status"] != "ok":
        return rec.get("error") or rec["status"]
    parts = []
    if rec.get("speedup_vs_1core") and not rec["impl"].endswith("@1"):
        parts.append(f"{rec['speedup_vs_1core']:.2f}x its 1-core time")
    if rec["impl"].startswith("pypto") and rec["vs"]:
        parts += [f"{v:.2f}x {k}" for k, v in rec["vs"].items()
                  if not k.startswith("pypto") and "@" not in k]
    if not parts:
        parts.append(f"ok (err {rec['rel_err']:.1e})" if rec.get("rel_err") is not None else "ok")
    if rec.get("compiled") and rec.get("first_call_s") is not None:
        parts.append(f"1st call {rec['first_call_s']:.2f} s")
    if rec.get("import_s") is not None:
        parts.append(f"import {rec['import_s'] * 1e3:.0f} ms")
    return ", ".join(parts)


COLUMNS = ["case", "shape", "impl", "median", "GFLOP/s", "GB/s", "of hw", "vs peers / status"]


def rows(records):
    for r in records:
        yield [r["case"], r["shape"], r["impl"], _time(r), _fmt(r.get("gflops"), ".1f"),
               _fmt(r.get("gbs"), ".1f"), _hw(r), _vs(r)]


def text_table(records, width_last=70):
    data = [[c if i < 7 else c[:width_last] for i, c in enumerate(row)] for row in rows(records)]
    widths = [max(len(COLUMNS[i]), *(len(row[i]) for row in data)) if data else len(COLUMNS[i])
              for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)),
             "  ".join("-" * w for w in widths)]
    prev = None
    for row in data:
        if prev is not None and row[0] != prev:
            lines.append("")
        prev = row[0]
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def _bar_value(b):
    v = b["value"]
    if v is None:
        return "-"
    if b["unit"] in ("of peak", "of copy bw"):
        return f"{v * 100:.0f}% {b['unit']}"
    if b["unit"] == "x":
        return f"{v:.2f}x"
    return f"{v:.2f} {b['unit']}"


def _verdict(b):
    return {True: "MET", False: "missed", None: "not measured"}[b["met"]]


def bars_table(bars):
    lines = []
    w = max([len(b["bar"]) for b in bars] + [3])
    for b in bars:
        why = f"  ({b['why']})" if b["why"] else ""
        lines.append(f"{b['bar'].ljust(w)}  {_bar_value(b):>18}  {_verdict(b)}{why}")
    return "\n".join(lines)


def machine_summary(m):
    cpu = m["cpu"]
    out = [f"CPU: {cpu.get('model')} ({cpu.get('arch')}), {cpu.get('cores')} cores usable, "
           f"SIMD: {' '.join(cpu.get('simd', []))}; caches: L1d {cpu.get('L1d', '?')}, "
           f"L2 {cpu.get('L2', '?')}, L3 {cpu.get('L3', '?')}",
           f"threads used by every impl: {m['threads']}; load average at start: "
           f"{m.get('loadavg_1min', '?')}"
           + (f", at end: {m['loadavg_1min_end']}" if "loadavg_1min_end" in m else "")]
    load = max(m.get("loadavg_1min") or 0, m.get("loadavg_1min_end") or 0)
    if load > 1.5 * (cpu.get("cores") or 1):
        out.append(f"WARNING: the machine was busy (load average {load:.1f} on {cpu.get('cores')} "
                   f"cores): absolute figures and fractions of peak are unreliable; ratios "
                   f"within a case (timed in interleaved rounds) less so")
    if m.get("fma_peak_1core"):
        out.append(f"FMA peak (fp32, probe {m.get('probe_isa')}): "
                   f"{m['fma_peak_1core']:.1f} GFLOP/s per core ({m.get('fma_bits_1core')}-bit); "
                   f"{m['fma_peak_all']:.1f} GFLOP/s measured on {m['threads']} at once; "
                   f"a case's peak = per-core peak x cores it used")
    else:
        out.append(f"FMA peak: not measured ({m.get('probe_error')})")
    mib = m["copy_bytes"] / 2 ** 20
    parts = [f"{k}: {m[key]:.1f}" for k, key in (("probe memcpy", "copy_gbs_probe"),
                                                 ("probe streaming", "copy_gbs_probe_nt"),
                                                 ("probe 1 core", "copy_gbs_probe_1core"),
                                                 ("np.copyto", "copy_gbs_numpy"),
                                                 ("torch copy_", "copy_gbs_torch"))
             if m.get(key)]
    out.append(f"copy bandwidth ({mib:.0f} MiB -> {mib:.0f} MiB, read+write): "
               f"{m['copy_gbs']:.1f} GB/s best ({'; '.join(parts)})")
    if m.get("blas_env_cleared"):
        out.append(f"BLAS environment cleared for this run: {m['blas_env_cleared']}")
    if m.get("blas_env_kept"):
        out.append(f"BLAS environment left as set (NumPy's BLAS may be held back): "
                   f"{m['blas_env_kept']}")
    if m.get("malloc_env"):
        out.append(f"malloc keeps freed memory for reuse ({m['malloc_env']}): outputs are not "
                   f"page-faulted in afresh on every call")
    if m.get("copy_gbs_dram"):
        out.append(f"copy bandwidth, 1 GiB buffers: {m['copy_gbs_dram']:.1f} GB/s")
    return "\n".join(out)


def markdown_table(records):
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    body = "".join("| " + " | ".join(c.replace("|", "/") for c in row) + " |\n"
                   for row in rows(records))
    return head + body


def markdown_bars(bars):
    head = "| bar | measured | verdict | note |\n|---|---|---|---|\n"
    return head + "".join(f"| {b['bar']} | {_bar_value(b)} | {_verdict(b)} | {b['why']} |\n"
                          for b in bars)


def chart(records, bars, path, title="PyPTO vs peers"):
    """Left: PyPTO's speedup over each peer, per case (log scale, 1x marked). Right: each impl's
    fraction of the machine's limit (FMA peak or copy bandwidth)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speed = []
    for r in records:
        if r["impl"] == "pypto" and r["status"] == "ok":
            for peer, v in r["vs"].items():
                if not peer.startswith("pypto"):
                    speed.append((f"{r['case']} vs {peer}", v))
    frac = [(f"{r['case']} {r['impl']}", r.get("peak_frac") or r.get("bw_frac"),
             "tab:blue" if r.get("peak_frac") else "tab:green")
            for r in records if r["status"] == "ok" and (r.get("peak_frac") or r.get("bw_frac"))]
    errors = [f"{r['case']}: {r['error']}" for r in records
              if r["impl"] == "pypto" and r["status"] != "ok"]
    h = max(4, 0.28 * max(len(speed), len(frac), 1) + 1.5)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, h))
    if speed:
        labels, vals = zip(*speed)
        ax1.barh(range(len(vals)), vals, color=["tab:green" if v >= 1 else "tab:red" for v in vals])
        for i, v in enumerate(vals):
            ax1.text(v, i, f" {v:.2f}x", va="center", fontsize=6)
        ax1.set_yticks(range(len(vals)), labels, fontsize=7)
        ax1.set_xscale("log")
        ax1.axvline(1.0, color="k", lw=0.8)
        ax1.invert_yaxis()
    else:
        ax1.text(0.5, 0.5, "no PyPTO result to compare" + ("\n" + "\n".join(errors[:8]) if errors
                 else ""), ha="center", va="center", fontsize=7, transform=ax1.transAxes,
                 wrap=True)
    ax1.set_title("PyPTO speedup over peer (>1: PyPTO faster)", fontsize=9)
    if frac:
        labels, vals, colors = zip(*frac)
        ax2.barh(range(len(vals)), [v * 100 for v in vals], color=colors)
        for i, v in enumerate(vals):
            ax2.text(v * 100, i, f" {v * 100:.0f}%", va="center", fontsize=6)
        ax2.set_yticks(range(len(vals)), labels, fontsize=7)
        ax2.axvline(85, color="k", lw=0.8, ls="--")
        ax2.invert_yaxis()
    ax2.set_title("% of measured FMA peak (blue) / copy bandwidth (green)", fontsize=9)
    met = sum(1 for b in bars if b["met"])
    fig.suptitle(f"{title}: {met}/{len(bars)} bars met", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
