"""The fuzz suite (docs/testing.md): hypothesis-driven mutations of valid ISA programs through
parse, print, verify, interpret and (a few) compile, each input in a crash-isolated worker
process; and random front-end kernels (shapes, ragged sizes, int32/int64 with extreme values,
float dtypes, compile options) on both backends against NumPy.

In `make test` it is bounded (PYPTO_FUZZ_INPUTS unset: 600 ISA inputs, a few compiled, and a few
kernels); `make fuzz` sets PYPTO_FUZZ_INPUTS=10000 and HYPOTHESIS_PROFILE=explore and prints a
summary. No input may crash or hang the worker, raise anything but PyptoError/MemoryError, break
the print/parse round trip, or make the interpreter and the CPU backend disagree."""
import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz_isa import Tally, Worker, corpus, mutate

LONG = int(os.environ.get("PYPTO_FUZZ_INPUTS", "0"))
ISA_INPUTS = LONG or 600
COMPILE_EVERY = 100 if LONG else 60  # compiling is ~100x dearer than interpreting
KERNELS = max(LONG // 100, 6) if LONG else 6
CORPUS = corpus()


KERNEL_RUNS = []  # (dtype, options) of every front-end kernel run, for the report


@pytest.fixture(scope="module")
def worker():
    w = Worker(timeout=120.0 if LONG else 60.0)
    yield w
    w.close()
    if KERNEL_RUNS:
        dtypes = sorted({d for d, _ in KERNEL_RUNS})
        report_line(f"[fuzz] kernels: {len(KERNEL_RUNS)} random front-end kernels over {', '.join(dtypes)} "
                    f"(both backends against NumPy), {w.restarts} worker restarts")


def report_line(line, findings=()):
    print("\n" + line)
    out = os.environ.get("PYPTO_FUZZ_REPORT")
    if out:
        with open(out, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            for res, req in list(findings)[:50]:
                f.write(f"  {res['outcome']}: {res['detail']}\n    input: {req!r}\n"[:2000])


def report(name, tally):
    report_line(f"[fuzz] {name}: {sum(tally.counts.values())} inputs; {tally.summary()}", tally.findings)


def test_isa_mutations(worker):
    tally = Tally()
    counter, shown = [0], [0]
    start = time.monotonic()

    @settings(max_examples=ISA_INPUTS, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data):
        base = CORPUS[data.draw(st.integers(0, len(CORPUS) - 1))]
        text = mutate(base, lambda n: data.draw(st.integers(0, max(n - 1, 0))))
        counter[0] += 1
        req = {"isa": text, "seed": counter[0], "compile": counter[0] % COMPILE_EVERY == 0}
        tally.add(req, worker.run(req))
        if LONG and counter[0] % 1000 == 0:  # a long run shows its progress, and findings as they come
            report_line(f"[fuzz] isa: {counter[0]} inputs after {time.monotonic() - start:.0f} s; {tally.summary()}",
                        tally.findings[shown[0]:])
            shown[0] = len(tally.findings)

    one()
    # The unmutated corpus too: every one of them must run, and compile, without a finding.
    for k, text in enumerate(CORPUS):
        req = {"isa": text, "seed": k, "compile": True}
        res = worker.run(req)
        tally.add(req, res)
        assert res["outcome"] in ("ok", "rejected"), (res, text)
    report("isa", tally)
    assert not tally.findings, "\n".join(f"{r['outcome']}: {r['detail']}\n{q!r}" for r, q in tally.findings[:5])


@settings(max_examples=KERNELS, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(dtype=st.sampled_from(["i32", "i64", "f32", "f64"]), rows=st.integers(1, 40), cols=st.integers(1, 300),
       data=st.data(), seed=st.integers(0, 2**16),
       options=st.fixed_dictionaries({"fusion": st.booleans(), "promote": st.booleans(),
                                      "double_buffer": st.booleans(), "parallel": st.booleans()}))
def test_frontend_kernels(worker, dtype, rows, cols, data, seed, options):
    from fuzz_worker import FLOAT_OPS, INT_OPS
    ops = data.draw(st.lists(st.sampled_from(INT_OPS if dtype in ("i32", "i64") else FLOAT_OPS),
                             min_size=1, max_size=4))
    req = {"kernel": {"dtype": dtype, "ops": ops, "rows": rows, "cols": cols, "options": options}, "seed": seed}
    res = worker.run(req)
    KERNEL_RUNS.append((dtype, tuple(sorted(options.items()))))
    assert res["outcome"] == "ok", (res, req)
