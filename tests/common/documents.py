"""Documents as plain values, parcels of them, and the shard rows the format says they make:
the oracles of the shuffle's and the writer's tests (docs/format.md#shuffle-and-shards)."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from transforms.inputs.documents import source_order
from transforms.params import WindowSpec
from transforms.plan.keys import doc_key
from transforms.plan.windows import WindowPlans, plan_windows
from transforms.shards.parcels import pack_parcels, read_parcel
from transforms.shards.rows import ShardCounts
from transforms.tokenize.tokenizers import ByteTokenizer

TOK = ByteTokenizer()
SPEC = WindowSpec(window=4, stride=3, tail="trace_back", score="new")


def docs_of(texts, *, spec=SPEC, seed=0, wide_at=None):
    """Documents as plain values: what `pack_parcels` is given and `parcel_documents` gives."""
    docs = []
    for i, text in enumerate(texts):
        doc_id = f"d{i}"
        z = TOK.encode(text)
        if wide_at == i:
            z[1:2] = 70000
        plan = plan_windows(len(z) - 1, spec, doc_id)
        docs.append({
            "doc_key": doc_key(seed, doc_id), "doc_id": doc_id, "source": f"f.jsonl:{i + 1}",
            "tokens": z.tolist(), "starts": plan.starts.tolist(),
            "lengths": plan.lengths.tolist(), "loss_starts": plan.loss_starts.tolist(),
            "covered": plan.covered, "repaired": i % 3 == 0,
        })
    return docs


def pack(docs, num_shards=1, joined=True):
    """`pack_parcels` of plain documents (their plans end to end)."""
    plans = WindowPlans(
        counts=np.array([len(d["starts"]) for d in docs], np.int64),
        covered=np.array([d["covered"] for d in docs], np.int64),
        starts=np.array([s for d in docs for s in d["starts"]], np.int64),
        lengths=np.array([x for d in docs for x in d["lengths"]], np.int32),
        loss_starts=np.array([x for d in docs for x in d["loss_starts"]], np.int32),
    )
    return pack_parcels(
        doc_keys=[d["doc_key"] for d in docs], doc_ids=[d["doc_id"] for d in docs],
        sources=[d["source"] for d in docs],
        tokens=[np.array(d["tokens"], np.int32) for d in docs], plans=plans,
        repaired=[d["repaired"] for d in docs], num_shards=num_shards, joined=joined,
    )


def doc(doc_id, text, spec, *, key=None, source=None, tokens=None, repaired=False):
    """One document as plain values (as `tests.transforms.shards.test_parcels.docs_of` makes
    them)."""
    z = TOK.encode(text).tolist() if tokens is None else list(tokens)
    plan = plan_windows(len(z) - 1, spec, doc_id)
    return {
        "doc_key": doc_key(spec.seed, doc_id) if key is None else key, "doc_id": doc_id,
        "source": source or f"src:{doc_id}", "tokens": z, "starts": plan.starts.tolist(),
        "lengths": plan.lengths.tolist(), "loss_starts": plan.loss_starts.tolist(),
        "covered": plan.covered, "repaired": repaired,
    }


def parcels_of(*batches):
    """One block per batch of documents (all in shard 0)."""
    return [data for batch in batches for _, data in pack(batch)]


def shuffled_batchings(docs, times=5, seed=0):
    """``times`` ways to cut ``docs``, in a shuffled order, into 5 blocks, themselves shuffled."""
    rng = random.Random(seed)
    for _ in range(times):
        shuffled = docs[:]
        rng.shuffle(shuffled)
        cuts = sorted(rng.sample(range(1, len(docs)), 4))
        blocks = parcels_of(*(shuffled[a:b] for a, b in zip([0, *cuts], [*cuts, len(docs)],
                                                            strict=True)))
        rng.shuffle(blocks)
        yield blocks


def reference(docs):
    """(rows, counts, rejected sources) of a shard's documents, straight from
    docs/format.md#shuffle-and-shards."""
    first = {}
    for d in sorted(docs, key=lambda d: source_order(d["source"])):
        first.setdefault(d["doc_id"], d)
    kept = sorted(first.values(), key=lambda d: (d["doc_key"], d["doc_id"]))
    rows = [
        {"doc_id": d["doc_id"], "doc_key": d["doc_key"], "window_index": i, "start": start,
         "length": length, "loss_start": loss, "doc_tokens": len(d["tokens"]),
         "tokens": d["tokens"][start : start + length + 1]}
        for d in kept
        for i, (start, length, loss) in enumerate(zip(d["starts"], d["lengths"],
                                                      d["loss_starts"], strict=True))
    ]
    counts = ShardCounts(
        rows=len(rows),
        documents=len(kept),
        documents_without_windows=sum(not d["starts"] for d in kept),
        tokens=sum(r["length"] + 1 for r in rows),
        pairs=sum(len(d["tokens"]) - 1 for d in kept),
        scored_targets=sum(r["length"] - r["loss_start"] for r in rows),
        uncovered_pairs=sum(len(d["tokens"]) - 1 - d["covered"] for d in kept),
        repaired_invalid_utf8=sum(d["repaired"] for d in kept),
    )
    rejected = sorted(d["source"] for d in docs if first[d["doc_id"]] is not d)
    return rows, counts, rejected


def parcel_documents(data: bytes) -> list[dict[str, Any]]:
    """Each document of a parcel (`transforms.shards.parcels`), as plain values, for assertions."""

    b = read_parcel(data)
    out, z, w, i, s = [], 0, 0, 0, 0
    for k in range(len(b.keys)):
        m, n = int(b.doc_tokens[k]), int(b.doc_windows[k])
        id_end, src_end = int(b.id_ends[k]), int(b.src_ends[k])
        out.append({
            "doc_key": int(b.keys[k]), "doc_id": b.ids[i:id_end].decode(),
            "source": b.sources[s:src_end].decode(), "tokens": b.tokens[z : z + m].tolist(),
            "starts": b.starts[w : w + n].tolist(), "lengths": b.lengths[w : w + n].tolist(),
            "loss_starts": b.loss_starts[w : w + n].tolist(), "covered": int(b.covered[k]),
            "repaired": bool(b.repaired[k]),
        })
        z, w, i, s = z + m, w + n, id_end, src_end
    return out
