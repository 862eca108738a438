"""The mixture's output pinned exactly: the stream, the states and the collated batches of
:class:`reader.MixtureSampler` and :class:`reader.MixedDataset` (windows, targets, a schedule,
packing; one and two ranks), so that a faster sampler or gather is held to the same output
(docs/mixtures.md)."""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from reader import MixedDataset, MixtureSampler, collate, collate_packed
from tests.common.mixtures import W, fakes, stream


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()[:16]


# (unit, weights, seq_len, world_size) → SHA-256 of the batches (2,000 windows or rows of all
# rank, batch_size 5 on one rank, 3 on two) and of rank 0's state after them.
PINNED_STREAMS = {
    ("windows", "5:3:2", None, 1): ("d5a66bc58cd047cd", "3a07538d24e4caa9"),
    ("windows", "5:3:2", None, 2): ("e16a87f903c0714f", "3cdfac720d52ef87"),
    ("targets", "5:3:2", None, 1): ("e5263f4f0f806f4c", "adcb2e643b2d3a8e"),
    ("targets", "5:3:2", None, 2): ("2981bdcd331cdaa6", "d0a1a5d062d803b5"),
    ("targets", "50:1:1", None, 1): ("8184640af24ca95b", "8ef07ba0e5293b7b"),
    ("targets", "50:1:1", None, 2): ("deb073450b3c66be", "48e25368136986c9"),
    ("windows", "schedule", None, 1): ("cf4fe736dd28a612", "d7a79a50460e1651"),
    ("windows", "schedule", None, 2): ("bc28376273074f18", "8c6b67f1e86356ea"),
    ("targets", "schedule", None, 1): ("9a31b92dee840c09", "506fab5cc3dd89ec"),
    ("targets", "schedule", None, 2): ("63fbab93f59fb17a", "26958700ae4c7f1c"),
    ("targets", "5:3:2", 2 * W, 1): ("fd2666d687beaad7", "f976ad977ce54dcb"),
    ("targets", "5:3:2", 2 * W, 2): ("f5f7342892141efb", "df4750aa7317791b"),
}


def _pinned_weights(name: str) -> Any:
    if name == "schedule":
        return [(0, {"s0": 5, "s1": 3, "s2": 2}), (37, {"s0": 1, "s1": 0, "s2": 4}),
                (90, {"s0": 0.1, "s1": 0.7, "s2": 0.2})]
    return dict(zip(("s0", "s1", "s2"), map(int, name.split(":")), strict=True))


@pytest.mark.slow
def test_pinned_batches_and_states() -> None:
    mixed = fakes([7, 30, 3])
    sampler = MixtureSampler(mixed, {"s0": 5, "s1": 3, "s2": 2}, 5, seed=3)
    assert stream(sampler, 4) == [[6, 13, 0, 39, 4], [10, 2, 32, 3, 38], [1, 11, 5, 37, 1],
                                  [19, 2, 29, 5, 39]]
    state = sampler.state_dict()
    assert state["sources"] == {
        "s0": {"fingerprint": "fake-7-8-0", "size": 7, "epoch": 1, "cursor": 3, "windows": 10,
               "targets": 27},
        "s1": {"fingerprint": "fake-30-8-1", "size": 30, "epoch": 0, "cursor": 6, "windows": 6,
               "targets": 16},
        "s2": {"fingerprint": "fake-3-8-2", "size": 3, "epoch": 1, "cursor": 1, "windows": 4,
               "targets": 9}}
    targets = MixtureSampler(mixed, {"s0": 5, "s1": 3, "s2": 2}, 5, seed=3, unit="targets")
    assert stream(targets, 4) == [[6, 13, 0, 4, 10], [2, 3, 39, 32, 1], [11, 5, 38, 1, 2],
                                  [19, 5, 37, 0, 39]]
    packed = MixtureSampler(mixed, {"s0": 5, "s1": 3, "s2": 2}, 2, seed=3, unit="targets",
                            seq_len=2 * W, open_rows=3)
    assert stream(packed, 3) == [[[6, 13, 0], [4, 10, 2, 32]], [[3, 39, 1, 38], [11, 5, 1, 0]],
                                 [[2, 19, 5], [37, 39, 3, 16, 22]]]
    assert packed.state_dict()["open_rows_windows"] == [[3, [["s1", 22, 8], ["s0", 4, 5]]],
                                                        [9, [["s0", 6, 7]]]]
    for (unit, weights, seq_len, ws), expected in PINNED_STREAMS.items():
        bs = 5 if ws == 1 else 3
        ranks = [MixtureSampler(mixed, _pinned_weights(weights), bs, seed=3, unit=unit,
                                seq_len=seq_len, rank=r, world_size=ws) for r in range(ws)]
        batches = [stream(s, 2000 // (ws * bs)) for s in ranks]
        assert (_digest(batches), _digest(ranks[0].state_dict())) == expected, (unit, weights)


_PINNED_KEYS = ("input_ids", "shift_labels", "attention_mask", "position_ids", "segment_ids",
                "lengths", "cu_seqlens", "max_seqlen", "num_targets", "num_windows",
                "source_ids", "sources")


def test_pinned_collated_batches(three: MixedDataset) -> None:
    indices, collated = [], []
    for unit, seq_len in (("windows", None), ("targets", None), ("targets", 2 * W)):
        kw = {"weights": {"web": 3, "code": 2, "books": 1}, "batch_size": 4, "seed": 4,
              "unit": unit, "seq_len": seq_len}
        indices += stream(MixtureSampler(three, **kw), 3)
        pad = (functools.partial(collate, pad_id=three.eos_id) if seq_len is None else
               functools.partial(collate_packed, seq_len=seq_len, pad_id=three.eos_id))
        loader = DataLoader(three, batch_sampler=MixtureSampler(three, **kw), collate_fn=pad)
        for _, batch in zip(range(3), loader, strict=False):
            collated.append({k: batch[k].tolist() if isinstance(batch[k], torch.Tensor)
                             else batch[k] for k in _PINNED_KEYS if k in batch})
    assert indices == [
        [6, 73, 9, 88], [19, 127, 29, 87], [5, 53, 2, 154],
        [6, 73, 9, 19], [88, 29, 127, 5], [87, 2, 15, 53],
        [[6, 73], [88, 29], [127, 5], [15, 53]], [[30, 108], [17, 61], [83, 7], [0, 69]],
        [[28, 90], [72, 8], [42, 32], [22, 56, 121]]]
    assert collated[0]["source_ids"] == [0, 1, 0, 1]
    assert collated[0]["input_ids"][2] == [111, 44, 65, 40, 60, 257, 257, 257]
    assert _digest(collated) == "0cb4bcb8055e61b9"  # every key of the nine batches
