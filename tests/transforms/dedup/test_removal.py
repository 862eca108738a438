"""The pure side of dedup and decontamination in the job (`transforms.dedup.removal`): buckets,
clusters, the band keys, what the encoding step skips, the manifest's object."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transforms.dedup.duplicates import DedupSpec
from transforms.dedup.removal import (
    EXACT,
    ChunkIds,
    EdgeBlock,
    KeyBlock,
    Removal,
    RemovalSpec,
    bucket_edges,
    chunk_keys,
    cluster_removals,
    component_edge_block,
    drop_removed,
    named,
)
from transforms.inputs.documents import Document


def _clusters(edges, ids):
    """`cluster_removals` of edges and doc_ids as tuples and a dict (packed as the job packs
    them)."""
    names: dict = {}
    for (chunk, position), doc_id in sorted(ids.items()):
        names.setdefault(chunk, ChunkIds(positions=[], ids=[]))
        names[chunk].positions.append(position)
        names[chunk].ids.append(doc_id)
    return list(cluster_removals([EdgeBlock.of(edges)], sorted(names.items())))


def _block(chunk: str, positions: list[int], keys: bytes) -> KeyBlock:
    return KeyBlock(chunk=(chunk, 0), positions=np.array(positions, np.int32).tobytes(),
                    keys=keys, width=16)


def test_buckets_link_each_document_to_its_first_whatever_the_block_order():
    blocks = [_block("f.jsonl", [0, 1, 2], b"K" * 16 + b"L" * 16 + b"M" * 16),
              _block("g.jsonl", [0, 1], b"L" * 16 + b"K" * 16)]
    edges = list(bucket_edges(blocks))
    assert edges == list(bucket_edges(blocks[::-1]))
    assert sorted(edges) == [((("g.jsonl", 0), 0), (("f.jsonl", 0), 1)),
                             ((("g.jsonl", 0), 1), (("f.jsonl", 0), 0))]


def _edges_by_unique(blocks: list[KeyBlock]):
    """`bucket_edges` as it was first written (np.unique of the byte strings): the reference
    its integer sort must equal, edge for edge and in the same order."""
    blocks = sorted(blocks)
    width = blocks[0].width
    keys = np.frombuffer(b"".join(b.keys for b in blocks), dtype=f"S{width}")
    block_of = np.repeat(np.arange(len(blocks)), [b.size for b in blocks])
    within = np.frombuffer(b"".join(b.positions for b in blocks), np.int32)
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    rows = np.flatnonzero(counts[inverse] > 1)
    order = rows[np.argsort(inverse[rows], kind="stable")]
    for bucket in np.split(order, np.flatnonzero(np.diff(inverse[order])) + 1):
        refs = [(blocks[b].chunk, int(within[b_row]))
                for b, b_row in zip(block_of[bucket].tolist(), bucket.tolist(), strict=True)]
        for ref in refs:
            if ref != min(refs):
                yield ref, min(refs)


# Keys from a few bytes, so that many are equal, and some differ only in trailing zeros.
_KEY_BYTES = st.sampled_from([b"\0", b"\1", b"\xff", b"a"])


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([16, 5, 8, 20]),
       st.lists(st.lists(st.lists(_KEY_BYTES, min_size=1, max_size=20), max_size=12),
                min_size=1, max_size=4))
def test_buckets_equal_those_of_a_sort_of_the_key_bytes(width, chunks):
    blocks = []
    for c, keys in enumerate(chunks):
        keys = [b"".join(k)[:width].ljust(width, b"\0") for k in keys]
        blocks.append(KeyBlock(chunk=(f"f{c % 2}", c), keys=b"".join(keys), width=width,
                               positions=np.arange(0, 3 * len(keys), 3, dtype=np.int32).tobytes()))
    assert list(bucket_edges(blocks)) == list(_edges_by_unique(blocks))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 12), min_size=1, max_size=4), st.integers(0, 4),
       st.integers(1, 6), st.integers(0, 2**32))
def test_component_edge_block_gives_the_clusters_of_every_bands_edges(sizes, near_bands, keys_per,
                                                               seed):
    """A few chunks, the exact band and up to 4 near bands whose keys come from a few
    values (so buckets overlap across bands and chain documents together): the removals
    from `component_edge_block` are those from every band's `bucket_edges`, and the documents
    that have an edge (whose doc_ids are looked up) are the same."""
    rnd = np.random.default_rng(seed)
    chunks = [(f"f{c}.jsonl", 100 * c) for c in range(len(sizes))]
    positions = [sorted(rnd.choice(40, size=n, replace=False).tolist()) for n in sizes]
    bands = []
    for band in [EXACT, *range(near_bands)]:
        blocks = [KeyBlock(chunk=chunk, positions=np.array(at, np.int32).tobytes(), width=16,
                           keys=b"".join(int(k).to_bytes(16, "big")
                                         for k in rnd.integers(0, keys_per, size=len(at))))
                  for chunk, at in zip(chunks, positions, strict=True)]
        bands.append((band, blocks[::-1] if band % 2 else blocks))
    ids = {(chunk, p): f"d{rnd.integers(0, 30)}" for chunk, at in zip(chunks, positions,
                                                                    strict=True) for p in at}
    every = [(band, a, b) for band, blocks in bands for a, b in bucket_edges(blocks)]
    fewer = list(component_edge_block(iter(bands)).edges())
    assert {r for _, a, b in fewer for r in (a, b)} == {r for _, a, b in every for r in (a, b)}
    assert len(fewer) <= 2 * len(ids)
    assert _clusters(fewer, ids) == _clusters(every, ids)


def _removals_by_dict(edges, ids):
    """`cluster_removals` as it was first written (a union-find over dicts of members): the
    reference its NumPy components must equal, removal for removal and in the same order."""
    def components(pairs):
        parent = {}

        def find(x):
            while parent[x] != x:
                x = parent[x]
            return x
        for a, b in pairs:
            parent.setdefault(a, a)
            parent.setdefault(b, b)
            ra, rb = sorted((find(a), find(b)))
            parent[rb] = ra
        return {m: find(m) for m in parent}
    pairs = [(band, (ids[a], *a), (ids[b], *b)) for band, a, b in edges]
    kept = components([(a, b) for _, a, b in pairs])
    same_text = components([(a, b) for band, a, b in pairs if band == EXACT])
    for member in sorted(kept):
        keeper = kept[member]
        if keeper != member:
            text_of = same_text.get(member)
            exact = text_of is not None and text_of == same_text.get(keeper)
            yield member[1], Removal(position=member[2], doc_id=member[0], kept=keeper[0],
                                     reason="exact_duplicate" if exact else "near_duplicate")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([EXACT, 0, 3]), st.integers(0, 25),
                          st.integers(0, 25)), max_size=60),
       st.lists(st.sampled_from(["a", "b", "c", "d", "e", "f"]), min_size=26, max_size=26))
def test_cluster_removals_equal_a_union_find_over_members(links, names):
    """Random edges between 26 documents of 3 chunks (doc_ids repeated across documents, so
    the keeper order falls back to chunk and position), exact and near ones."""
    ref = [(("f.jsonl", 10 * (d % 3)), d // 3) for d in range(26)]
    ids = {ref[d]: names[d] for d in range(26)}
    edges = [(band, ref[a], ref[b]) for band, a, b in links if a != b]
    assert _clusters(edges, ids) == list(_removals_by_dict(edges, ids))


def test_component_edge_block_refuses_bands_of_other_documents():
    one = _block("f.jsonl", [0, 1], b"K" * 32)
    other = _block("f.jsonl", [0, 2], b"K" * 32)
    with pytest.raises(RuntimeError, match="band 0 holds other documents"):
        component_edge_block([(EXACT, [one]), (0, [other])])


def test_named_gives_the_doc_ids_of_the_wanted_positions_only():
    ids = ChunkIds(positions=[0, 2, 5], ids=["x", "y", "z"])
    assert named(ids, [5, 0, 5]) == ChunkIds(positions=[0, 5], ids=["x", "z"])


def test_edge_blocks_pack_edges_in_order_and_name_the_documents_they_join():
    f, g = ("f.jsonl", 0), ("f.jsonl", 900)
    edges = [(EXACT, (g, 3), (f, 1)), (2, (f, 7), (f, 1)), (0, (g, 3), (g, 0))]
    block = EdgeBlock.of(edges)
    assert block.chunks == (f, g) and block.size == 3
    assert list(block.edges()) == edges
    assert block.wanted() == {f: [1, 7], g: [0, 3]}
    assert EdgeBlock.of([]).size == 0 and EdgeBlock.of([]).wanted() == {}


def test_component_edge_block_is_a_star_per_component_whatever_the_blocks_order():
    blocks = [_block("f.jsonl", [0, 1, 2], b"K" * 16 + b"L" * 16 + b"K" * 16),
              _block("g.jsonl", [0, 4], b"L" * 16 + b"K" * 16)]
    block = component_edge_block([(EXACT, blocks), (0, blocks[::-1])])
    assert block == component_edge_block([(EXACT, blocks), (0, blocks)])
    f, g = ("f.jsonl", 0), ("g.jsonl", 0)
    star = [((f, 2), (f, 0)), ((g, 0), (f, 1)), ((g, 4), (f, 0))]
    assert list(block.edges()) == [(band, a, b) for band in (EXACT, 0) for a, b in star]


def test_a_lost_doc_id_is_named():
    edges = [(EXACT, (("f.jsonl", 0), 1), (("f.jsonl", 0), 4))]
    with pytest.raises(RuntimeError, match="lost the doc_id of document 4 of chunk"):
        _clusters(edges, {(("f.jsonl", 0), 1): "a"})


def test_a_chain_is_one_cluster_kept_by_the_smallest_doc_id():
    # a ~ b (near), b = c (exact), d = e (exact): a keeps b and c; d keeps e. The documents'
    # places say nothing of the order: the doc_ids do.
    ref = {name: (("f.jsonl", 0), 9 - i) for i, name in enumerate("abcde")}
    ids = {r: name for name, r in ref.items()}
    edges = [(0, ref["b"], ref["a"]), (-1, ref["c"], ref["b"]), (-1, ref["d"], ref["e"])]
    removed = {r.doc_id: (r.reason, r.kept) for _, r in _clusters(edges, ids)}
    assert removed == {"b": ("near_duplicate", "a"), "c": ("near_duplicate", "a"),
                       "e": ("exact_duplicate", "d")}
    # The same, edges in another order and the other way round.
    flipped = [(band, y, x) for band, x, y in edges[::-1]]
    assert {r.doc_id: (r.reason, r.kept) for _, r in _clusters(flipped, ids)} == removed


def test_drop_removed_keeps_aside_by_position_and_refuses_a_moved_document():
    docs = [Document(doc_id=i, text=f"text {i}", source=f"f.jsonl:{n}")
            for n, i in enumerate("abc", 1)]
    removal = Removal(position=5, doc_id="b", reason="exact_duplicate", kept="a")
    kept, gone = drop_removed(docs, 4, {5: removal})
    assert [d.doc_id for d in kept] == ["a", "c"]
    assert gone[0].to_json() == {"reason": "exact_duplicate", "source": "f.jsonl:2",
                                 "detail": "the same normalized text as 'a', which is kept",
                                 "record": "text b", "truncated": False, "doc_id": "b",
                                 "kept": "a"}
    with pytest.raises(RuntimeError, match="the input changed while the job ran"):
        drop_removed(docs, 3, {5: removal})


def test_removal_spec_manifest_object_and_validation():
    spec = RemovalSpec(dedup=DedupSpec(mode="exact"), eval_files=(("/x/e.jsonl", "e.jsonl", 9),))
    assert spec.to_json({"e.jsonl": 2}) == {
        "mode": "exact", "decontaminate": {"ngram": 13, "files": {"e.jsonl": 2}}}
    assert spec.fingerprint_json()["decontaminate"]["files"] == {"e.jsonl": 9}
    with pytest.raises(ValueError, match="`decontaminate_ngram` must be at most 64"):
        RemovalSpec(eval_ngram=65)
    with pytest.raises(ValueError, match="both named e.jsonl"):
        RemovalSpec(eval_files=(("/x/e.jsonl", "e.jsonl", 1), ("/y/e.jsonl", "e.jsonl", 1)))


def test_chunk_keys_one_block_per_band_keys_of_the_kept_documents():
    docs = [Document(doc_id=f"d{i}", text=f"same words here {i % 2}", source=f"f:{i}")
            for i in range(5)]
    removals, blocks, ids = chunk_keys(docs, chunk=("f", 0), spec=RemovalSpec(
        dedup=DedupSpec(mode="near", bands=4, rows=2)), index=None, batch=2)
    assert removals == []
    assert ids == ChunkIds(positions=[0, 1, 2, 3, 4], ids=[d.doc_id for d in docs])
    assert [band for band, _ in blocks] == [-1, 0, 1, 2, 3]
    assert all(b.size == 5 and len(b.keys) == 16 * 5 for _, b in blocks)
    edges = sorted(bucket_edges([blocks[0][1]]))
    assert [(a[1], b[1]) for a, b in edges] == [(2, 0), (3, 1), (4, 0)]


def test_every_removal_must_be_kept_aside_by_reason():
    from transforms.dedup.removal import check_removals_kept_aside

    check_removals_kept_aside({"exact_duplicate": 2, "contaminated": 1},
                              {"exact_duplicate": 2, "contaminated": 1, "empty": 4})
    with pytest.raises(RuntimeError, match=r"the dedup pass removed \{'contaminated': 0, "
                       r"'exact_duplicate': 2, 'near_duplicate': 1\}, but the encoding step "
                       r"kept aside \{'contaminated': 0, 'exact_duplicate': 2, "
                       r"'near_duplicate': 0\}"):
        check_removals_kept_aside({"exact_duplicate": 2, "near_duplicate": 1},
                                  {"exact_duplicate": 2})
