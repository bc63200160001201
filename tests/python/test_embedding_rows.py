"""Row gathers (embedding, index_select) move whole rows: tiles as wide as a row up to 16 KiB, so a
wider row is split into column tiles with a ragged last one. Random tables, poisoned outputs,
exact comparison with NumPy's indexing, on the interpreter and the CPU backend."""
import numpy as np
import pytest

import pypto
from pypto_testutil import jit, poisoned, rand


def embed_into(ids, table, out):
    out[...] = pypto.embedding(ids, table)


# (vocab, dim, ids): rows narrower than a tile, wider than one (4096 floats) with a ragged tail,
# and a count that leaves a ragged last block of rows.
@pytest.mark.parametrize("vocab,dim,n", [(50, 24, 37), (20, 4100, 11), (300, 1030, 45)])
def test_embedding_rows(backend, vocab, dim, n):
    table = rand(vocab, dim)
    ids = np.random.default_rng(dim).integers(0, vocab, size=n).astype(np.int64)
    out = poisoned(n, dim)
    jit(embed_into, backend)(ids, table, out)
    np.testing.assert_array_equal(out, table[ids])


def embed_2d_ids(ids, table):
    return pypto.embedding(ids, table)


def test_embedding_2d_ids_f64(backend):
    table = rand(40, 130, dtype=np.float64)
    ids = np.random.default_rng(3).integers(0, 40, size=(3, 19)).astype(np.int32)
    np.testing.assert_array_equal(jit(embed_2d_ids, backend)(ids, table), table[ids])
