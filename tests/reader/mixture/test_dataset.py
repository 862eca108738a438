"""`reader.mixture.dataset`: several datasets as one index space of named sources
(docs/mixtures.md).

Its fast path gives exactly what the per-index path gives: a batch that
:class:`reader.MixtureSampler` yields carries its windows grouped by source
(:class:`reader.mixture.dataset.GroupedIndices`), and :meth:`reader.MixedDataset.__getitems__`
gathered from that grouping must equal the same indices gathered one by one, and each window
``mixed[k]`` (docs/mixtures.md#how-it-works-and-what-it-costs)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from reader import MixedDataset, MixtureSampler, WindowDataset, collate, collate_packed
from reader.batches import add_sources
from reader.mixture.dataset import GroupedIndices
from tests.common.reader_data import edit_manifest, random_docs, write_docs

W = 8
NAMES = ("web", "code", "books", "math")


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> dict[str, WindowDataset]:
    root = tmp_path_factory.mktemp("pool")
    out = {}
    for k, name in enumerate(NAMES):
        write_docs(root / name, random_docs(4 + 9 * k, seed=10 + k, max_len=50), window=W,
                   stride=5, score_new=True, num_shards=1 + k % 3)
        out[name] = WindowDataset(root / name, cache_dir=root / "cache")
    return out


def _same_batch(fast: Any, slow: Any) -> None:
    assert fast.tokens.tolist() == slow.tokens.tolist()
    assert fast.offsets.tolist() == slow.offsets.tolist()
    assert fast.index.tolist() == slow.index.tolist()
    assert fast.records.tobytes() == slow.records.tobytes()
    assert fast.source_ids.tolist() == slow.source_ids.tolist()
    assert fast.sources == slow.sources


def _same_dict(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, torch.Tensor):
            assert x.tolist() == y.tolist(), key
        else:
            assert x == y, key


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4, unique=True),
       st.lists(st.integers(0, 9), min_size=4, max_size=4), st.sampled_from(["windows", "targets"]),
       st.integers(1, 9), st.integers(1, 3), st.integers(0, 2**31), st.booleans())
def test_grouped_batches_are_the_per_index_batches(pool: dict[str, WindowDataset],
                                                   names: list[str], raw: list[int], unit: str,
                                                   batch_size: int, world_size: int, seed: int,
                                                   packed: bool) -> None:
    mixed = MixedDataset({n: pool[n] for n in names})
    weights = {n: w for n, w in zip(names, raw, strict=False)}
    if not any(weights.values()):
        weights[names[0]] = 1
    seq_len = 2 * W if packed else None
    for rank in range(world_size):
        sampler = MixtureSampler(mixed, weights, batch_size, seed=seed, unit=unit, rank=rank,
                                 world_size=world_size, seq_len=seq_len)
        for _, batch in zip(range(6), sampler, strict=False):
            if packed:
                rows = mixed.__getitems__(batch)
                assert [[w["index"] for w in row] for row in rows] == batch
                for row, indices in zip(rows, batch, strict=True):
                    for w, k in zip(row, indices, strict=True):
                        one = mixed[k]
                        assert w["tokens"].tolist() == one["tokens"].tolist()
                got = collate_packed(rows, seq_len=seq_len, pad_id=mixed.eos_id)
                names = [mixed[k]["source"] for r in batch for k in r]
                assert [got["sources"][s] for s in got.pop("source_ids").tolist()] == names
                del got["sources"]  # windows as dicts carry their source by name only
                _same_dict(got, collate_packed([[mixed[k] for k in r] for r in batch],
                                               seq_len=seq_len, pad_id=mixed.eos_id))
                continue
            assert isinstance(batch, GroupedIndices) and batch.grouped is not None
            fast = mixed.__getitems__(batch)  # from the sampler's grouping
            slow = mixed.__getitems__(list(batch))  # index by index
            _same_batch(fast, slow)
            for w, k in zip(fast, batch, strict=True):  # and every window as mixed[k]
                one = mixed[k]
                assert w["tokens"].tolist() == one["tokens"].tolist()
                assert (w["source"], w["index"]) == (one["source"], k)
            pad = functools.partial(collate, pad_id=mixed.eos_id)
            _same_dict(pad(fast), pad(slow))


def test_a_changed_grouped_batch_is_gathered_index_by_index(
        pool: dict[str, WindowDataset]) -> None:
    mixed = MixedDataset({n: pool[n] for n in NAMES[:3]})
    batch = next(iter(MixtureSampler(mixed, {"web": 1, "code": 1, "books": 1}, 6, seed=1)))
    assert batch.grouped is not None
    batch[0], batch[1] = batch[1], batch[0]  # any change drops the grouping
    assert batch.grouped is None
    assert mixed.__getitems__(batch).index.tolist() == list(batch)
    other = MixedDataset({n: pool[n] for n in NAMES[1:]})  # another mixture: not its grouping
    mine = next(iter(MixtureSampler(mixed, {"web": 1, "code": 1, "books": 1}, 6, seed=1)))
    assert mine.grouped is not None and mine.grouped[0] != other.key
    indices = [k for k in mine if k < len(other)]
    assert other.__getitems__(GroupedIndices(indices, mine.grouped)).index.tolist() == indices
    assert np.array_equal(mixed.__getitems__(mine).index, np.asarray(list(mine)))


def test_mixed_dataset_index_space_items_and_batches(three: MixedDataset) -> None:
    sizes = [len(three.sources[n]) for n in three.names]
    assert len(three) == sum(sizes)
    assert three.offsets == {"web": 0, "code": sizes[0], "books": sizes[0] + sizes[1]}
    assert three.source_of(sizes[0]) == ("code", 0)
    assert three.source_of(-1) == ("books", sizes[2] - 1)
    w = three[sizes[0] + 2]
    local = three.sources["code"][2]
    assert w["source"] == "code" and w["index"] == sizes[0] + 2 and w["source_index"] == 2
    assert w["tokens"].tolist() == local["tokens"].tolist() and w["doc_id"] == local["doc_id"]
    indices = [len(three) - 1, 0, sizes[0] + 1, 3, sizes[0]]
    batch = three.__getitems__(indices)
    assert [x["source"] for x in batch] == ["books", "web", "code", "web", "code"]
    for x, i in zip(batch, indices, strict=True):
        assert x["tokens"].tolist() == three[i]["tokens"].tolist()
    one = collate(batch, pad_id=three.eos_id)
    ref = collate([three[i] for i in indices], pad_id=three.eos_id)
    for key in ("input_ids", "shift_labels", "position_ids", "attention_mask"):
        assert torch.equal(one[key], ref[key]), key
    assert one["sources"] == ("web", "code", "books")
    assert one["source_ids"].tolist() == [2, 0, 1, 0, 1]
    assert three.lengths.tolist() == [x["length"] for x in map(three.__getitem__,
                                                                range(len(three)))]
    rows = [[0, sizes[0]], [len(three) - 1]]
    packed = collate_packed(three.__getitems__(rows), seq_len=2 * W, pad_id=three.eos_id)
    assert packed["source_ids"].tolist() == [0, 1, 2] and packed["num_windows"] == 3


def test_mixed_dataset_refuses_another_tokenizer(three: MixedDataset, tmp_path: Path) -> None:
    edit_manifest(tmp_path / "books", lambda m: m["tokenizer"].update(eos_id=256))
    with pytest.raises(ValueError, match="'web' and 'other' differ in their tokenizer eos_id: "
                                         "257 vs 256"):
        MixedDataset({"web": three.sources["web"], "other": WindowDataset(tmp_path / "books")})


@pytest.mark.parametrize(("sources", "message"), [
    ({}, "`sources` must be a non-empty mapping of names to datasets, but got {}"),
    ([], "`sources` must be a non-empty mapping of names to datasets, but got []"),
    ({"": None}, "a source name must be non-empty text without '=' or ',', but got ''"),
    ({"a=b": None}, "a source name must be non-empty text without '=' or ',', but got 'a=b'"),
    ({"a,b": None}, "a source name must be non-empty text without '=' or ',', but got 'a,b'"),
    ({"web": [1, 2]}, "source 'web' must be a WindowDataset (with a manifest), but got list"),
])
def test_what_is_not_a_mixture_of_named_datasets_is_refused(sources, message) -> None:
    with pytest.raises(ValueError) as info:
        MixedDataset(sources)
    assert str(info.value) == message


def test_the_index_space_ends_and_the_tokenizer_and_window_of_the_sources(
        pool: dict[str, WindowDataset]) -> None:
    mixed = MixedDataset({"math": pool["math"], "web": pool["web"]})
    n_math, n_web = len(pool["math"]), len(pool["web"])
    assert (mixed.names, mixed.offsets, len(mixed)) == (
        ("math", "web"), {"math": 0, "web": n_math}, n_math + n_web)
    assert [mixed.source_of(k) for k in (0, n_math - 1, n_math, -n_web - n_math)] == [
        ("math", 0), ("math", n_math - 1), ("web", 0), ("math", 0)]
    for k in (n_math + n_web, -n_math - n_web - 1):
        with pytest.raises(IndexError, match=f"index {k} is out of range for "
                                             f"{n_math + n_web} windows"):
            mixed.source_of(k)
    assert (mixed.window, mixed.vocab_size, mixed.bos_id, mixed.eos_id) == (W, 258, 256, 257)
    assert mixed.fingerprints == {n: pool[n].fingerprint for n in ("math", "web")}
    assert mixed.key == (("math", n_math), ("web", n_web))
    assert mixed.window_sizes([n_math, 0])[0].tolist() == [
        mixed[n_math]["length"], mixed[0]["length"]]


def test_grouped_indices_equal_the_plain_list_and_any_change_drops_the_grouping() -> None:
    for change in (lambda b: b.append(9), lambda b: b.sort(), lambda b: b.pop(),
                   lambda b: b.__setitem__(0, 5), lambda b: b.extend([1]), lambda b: b.clear(),
                   lambda b: b.reverse(), lambda b: b.insert(0, 1), lambda b: b.remove(3)):
        batch = GroupedIndices([3, 1, 2], ("key",))
        assert batch == [3, 1, 2] and batch.grouped == ("key",)
        change(batch)
        assert batch.grouped is None
    batch = GroupedIndices([3, 1])
    batch += [4]
    assert batch == [3, 1, 4] and batch.grouped is None


def test_add_sources_leaves_a_batch_of_one_dataset_as_it_is(pool: dict[str, WindowDataset]):
    ds = pool["web"]
    batch = {"input_ids": None}
    add_sources(batch, ds.__getitems__([0, 1]))
    assert batch == {"input_ids": None}
    mixed = MixedDataset({"web": ds, "code": pool["code"]})
    add_sources(batch, mixed.__getitems__([len(ds), 0]))
    assert batch["source_ids"].tolist() == [1, 0] and batch["sources"] == ("web", "code")


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("gather")
    out = {}
    for k, name in enumerate(("web", "code", "books")):
        write_docs(base / name, random_docs(6 + 7 * k, seed=30 + k, max_len=45), window=W,
                   stride=5, score_new=True, num_shards=2 + k)
        out[name] = base / name
    return out


def test_raw_records_are_the_structured_records_with_or_without_the_index(
        roots: dict[str, Path], tmp_path: Path) -> None:
    built = WindowDataset(roots["books"], cache_dir=tmp_path / "a")
    built.prepare()
    index = built._dataset_index()
    assert index is not None
    idx = np.array([5, 0, len(built) - 1, 5, 2], np.int64)
    assert built.records(idx).tobytes() == index[idx].tobytes()
    assert built.records(idx).dtype == index.dtype
    fresh = WindowDataset(roots["books"], cache_dir=tmp_path / "b")  # no layout built yet
    assert fresh.records(idx).tobytes() == index[idx].tobytes()


def test_a_source_without_its_index_is_gathered_from_its_shards_alike(
        roots: dict[str, Path], tmp_path: Path) -> None:
    # "code" in a cache of its own, never prepared: its dataset index is built only once
    # every shard has been read, so the first batches gather it shard by shard.
    prepared = {n: WindowDataset(r, cache_dir=tmp_path / "warm") for n, r in roots.items()}
    for ds in prepared.values():
        ds.prepare()
    cold = dict(prepared, code=WindowDataset(roots["code"], cache_dir=tmp_path / "cold"))
    assert cold["code"]._dataset_index() is None
    warm_mix, cold_mix = MixedDataset(prepared), MixedDataset(cold)
    sampler = MixtureSampler(cold_mix, {"web": 2, "code": 5, "books": 3}, 7, seed=3)
    for _, batch in zip(range(8), sampler, strict=False):
        got, want = cold_mix.__getitems__(batch), warm_mix.__getitems__(list(batch))
        assert got.tokens.tolist() == want.tokens.tolist()
        assert got.offsets.tolist() == want.offsets.tolist()
        assert got.records.tobytes() == want.records.tobytes()
        assert got.source_ids.tolist() == want.source_ids.tolist()
        for w, k in zip(got, batch, strict=True):
            assert w["tokens"].tolist() == warm_mix[k]["tokens"].tolist()
