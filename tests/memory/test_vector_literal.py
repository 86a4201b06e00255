"""The query vector's text form (memory.search.plans.vector_literal): exact, and written once
for the several legs of a search that bind it."""

from __future__ import annotations

import numpy as np
import pytest

from memory.search.plans import _vector_text, vector_literal


def test_the_text_gives_back_the_very_floats():
    vector = list(np.random.default_rng(3).normal(size=384))

    text = vector_literal(vector)

    assert [float(part) for part in text.strip("[]").split(",")] == [float(v) for v in vector]


@pytest.mark.django_db
def test_pgvector_reads_the_text_as_the_vector():
    from django.db import connection

    vector = [0.25, -1.5, 3.0e-7]
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::vector::text", [vector_literal(vector)])
        assert cursor.fetchone()[0] == "[0.25,-1.5,3e-07]"


def test_a_vector_bound_again_is_not_written_again():
    vector = [0.1 * i for i in range(384)]
    vector_literal(vector)
    before = _vector_text.cache_info()

    again = vector_literal(list(vector))  # an equal list, as the next leg passes it

    after = _vector_text.cache_info()
    assert (after.hits - before.hits, after.misses - before.misses) == (1, 0)
    assert again == vector_literal(tuple(vector))
