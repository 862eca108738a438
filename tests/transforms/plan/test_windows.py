"""The window planner against docs/format.md#the-planner: worked examples and properties."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.params import WindowSpec
from transforms.plan.windows import WindowPlans, plan_windows, plan_windows_batch, random_offset


def reference(pairs, spec, r):
    """The algorithm of docs/format.md#the-planner, line by line."""
    out, s, w = [], r, spec.window
    while s < pairs:
        length = min(w, pairs - s)
        if length == w:
            out.append((s, w))
            if s + w == pairs:
                break
            s += spec.stride
            continue
        if spec.tail == "keep" and length >= spec.min_tail:
            out.append((s, length))
        elif spec.tail == "trace_back":
            s2 = max(0, pairs - w)
            out.append((s2, pairs - s2))
        break
    loss, prev_end = [], None
    for start, length in out:
        new = 0 if prev_end is None else max(0, prev_end - start)
        loss.append(new if spec.score == "new" else 0)
        prev_end = start + length
    return out, loss


def windows(plan):
    return list(zip(plan.starts.tolist(), plan.lengths.tolist(), strict=True))


@pytest.mark.parametrize(
    ("tail", "score", "expected", "loss"),
    [
        ("drop", "all", [(0, 512), (256, 512), (512, 512)], [0, 0, 0]),
        ("trace_back", "all", [(0, 512), (256, 512), (512, 512), (688, 512)], [0, 0, 0, 0]),
        ("trace_back", "new", [(0, 512), (256, 512), (512, 512), (688, 512)], [0, 256, 256, 336]),
        ("keep", "new", [(0, 512), (256, 512), (512, 512), (768, 432)], [0, 256, 256, 256]),
    ],
)
def test_worked_example_1(tail, score, expected, loss):
    plan = plan_windows(1200, WindowSpec(window=512, stride=256, tail=tail, score=score))
    assert windows(plan) == expected
    assert plan.loss_starts.tolist() == loss


def test_worked_example_1_drop_count_formula():
    assert len(plan_windows(1200, WindowSpec(window=512, stride=256, tail="drop")).starts) == (
        (1200 - 512) // 256 + 1
    )


def test_worked_example_2_abcde_and_abcd():
    z = [256, 97, 98, 99, 100, 101, 257]
    plan = plan_windows(len(z) - 1, WindowSpec(window=2, stride=2, tail="keep"))
    inputs = [z[s : s + n] for s, n in windows(plan)]
    targets = [z[s + 1 : s + n + 1] for s, n in windows(plan)]
    assert inputs == [[256, 97], [98, 99], [100, 101]]
    assert targets == [[97, 98], [99, 100], [101, 257]]
    assert sum(targets, []) == z[1:]

    z = [256, 97, 98, 99, 100, 257]
    plan = plan_windows(len(z) - 1, WindowSpec(window=2, stride=2, tail="keep"))
    s, n = windows(plan)[-1]
    assert (z[s : s + n], z[s + 1 : s + n + 1], n) == ([100], [257], 1)


def test_empty_body_has_one_pair():
    plan = plan_windows(1, WindowSpec(window=4, stride=4))
    assert windows(plan) == [(0, 1)]


def test_no_pairs_is_an_error():
    with pytest.raises(ValueError, match="at least one pair"):
        plan_windows(0, WindowSpec(window=4, stride=4))


specs = st.builds(
    lambda w, s, tail, mt, score, offset, seed: WindowSpec(
        window=w, stride=s, tail=tail, min_tail=min(mt, w), score=score, offset=offset, seed=seed
    ),
    st.integers(1, 40),
    st.integers(1, 50),
    st.sampled_from(["keep", "drop", "trace_back"]),
    st.integers(1, 40),
    st.sampled_from(["all", "new"]),
    st.sampled_from(["zero", "random"]),
    st.integers(0, 2**64 - 1),
)


@settings(max_examples=600, deadline=None)
@given(pairs=st.integers(1, 400), spec=specs, doc=st.text(max_size=8))
def test_matches_reference_algorithm(pairs, spec, doc):
    r = random_offset(pairs, spec, doc) if spec.offset == "random" else 0
    plan = plan_windows(pairs, spec, doc)
    expected, loss = reference(pairs, spec, r)
    assert windows(plan) == expected
    assert plan.loss_starts.tolist() == loss
    # Windows stay inside [0, P) of their document, and loss_start < length.
    assert all(s >= 0 and s + n <= pairs and n >= 1 for s, n in expected)
    assert np.all((plan.loss_starts >= 0) & (plan.loss_starts < plan.lengths))
    covered = set()
    for s, n in expected:
        covered |= set(range(s, s + n))
    assert plan.covered == len(covered)


@settings(max_examples=400, deadline=None)
@given(
    pairs=st.integers(1, 400),
    w=st.integers(1, 40),
    data=st.data(),
    tail=st.sampled_from(["keep", "trace_back"]),
)
def test_score_new_scores_every_target_exactly_once(pairs, w, data, tail):
    stride = data.draw(st.integers(1, w))
    spec = WindowSpec(window=w, stride=stride, tail=tail, score="new")
    plan = plan_windows(pairs, spec)
    scored = []
    for s, n, ell in zip(plan.starts, plan.lengths, plan.loss_starts, strict=True):
        scored.extend(range(s + ell, s + n))  # pair indices whose targets are scored
    assert scored == list(range(pairs))


@settings(max_examples=300, deadline=None)
@given(pairs=st.integers(1, 400), w=st.integers(1, 40), s=st.integers(1, 50))
def test_drop_count_formula(pairs, w, s):
    plan = plan_windows(pairs, WindowSpec(window=w, stride=s, tail="drop"))
    assert len(plan.starts) == (0 if pairs < w else (pairs - w) // s + 1)


@settings(max_examples=300, deadline=None)
@given(pairs=st.integers(1, 400), spec=specs, doc=st.text(max_size=8))
def test_random_offset_in_range_and_seeded(pairs, spec, doc):
    r = random_offset(pairs, spec, doc)
    bound = min(spec.stride, pairs - spec.window + 1) if pairs > spec.window else 1
    assert 0 <= r < bound
    assert r == random_offset(pairs, spec, doc)


def test_random_offsets_differ_by_seed_and_document():
    spec = WindowSpec(window=10, stride=100, offset="random", seed=1)
    other = WindowSpec(window=10, stride=100, offset="random", seed=2)
    offsets = [random_offset(1000, spec, f"d{i}") for i in range(200)]
    assert len(set(offsets)) > 50  # spread over [0, 100)
    assert offsets != [random_offset(1000, other, f"d{i}") for i in range(200)]


@settings(max_examples=300, deadline=None)
@given(pairs=st.lists(st.integers(1, 120), max_size=12), spec=specs)
def test_batch_planner_plans_each_document_as_the_single_planner(pairs, spec):
    ids = [f"doc{i}" for i in range(len(pairs))]
    batch = plan_windows_batch(pairs, spec, ids)
    again = WindowPlans.of(batch.split())
    for a, b in zip(batch, again, strict=True):
        assert a.tolist() == b.tolist() and a.dtype == b.dtype
    for p, doc_id, plan in zip(pairs, ids, batch.split(), strict=True):
        one = plan_windows(p, spec, doc_id)
        assert plan.starts.tolist() == one.starts.tolist()
        assert plan.lengths.tolist() == one.lengths.tolist()
        assert plan.loss_starts.tolist() == one.loss_starts.tolist()
        assert plan.covered == one.covered
        assert (plan.starts.dtype, plan.lengths.dtype, plan.loss_starts.dtype) == (
            np.int64, np.int32, np.int32)


def test_batch_planner_refuses_a_document_without_pairs():
    with pytest.raises(ValueError, match="at least one pair"):
        plan_windows_batch([3, 0], WindowSpec(window=4, stride=3), ["a", "b"])
