"""A step's several outputs as one PCollection of (tag, value) pairs, split by tag.

Beam's ``with_outputs`` is not portable to every runner: in Beam 2.77's DaskRunner a consumer
of any output of a multi-output ParDo receives every output, tags mixed, and anything a DoFn
emits from ``finish_bundle`` is dropped (README "Running at scale" shows both with a
four-line pipeline). So a step with several outputs here emits ``(tag, value)`` pairs from
``process`` (EncodeChunks also from ``finish_bundle``, for the tokenizer rejects of a
bundle's last batches, but never on Dask: `pipeline.steps.encode`), and `SplitTags` hands each
tag's values on through one single-output ``FlatMap`` per tag (``beam.Partition`` would not
do: it is itself a multi-output ParDo).
On the FnApiRunner, Dataflow and Flink the FlatMaps fuse into the producing stage, so an
element costs one tuple and one function call more; the elements here are big and few
(parcels, receipts, shards), so that is nothing next to the work.

`StepFn` is the DoFn the job's steps are made of: Beam looks at fewer of its methods.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam

__all__ = ["PARCELS", "RECEIPTS", "REJECTS", "SHARDS", "Outputs", "SplitTags", "StepFn"]

# The tags, the same in every step that emits them. EncodeChunks emits PARCELS (a shard's
# parcels, or a spill file's path), REJECTS and RECEIPTS (one per chunk); WriteShards SHARDS
# (each written shard) and REJECTS (duplicate ids).
PARCELS = "parcels"
REJECTS = "rejects"
RECEIPTS = "receipts"
SHARDS = "shards"


class StepFn(beam.DoFn):
    """A DoFn whose ``dir`` lists its own attributes and its classes' own, not beam.DoFn's.

    Beam looks for state and timer parameters in the signature of every method ``dir``
    lists (`apache_beam.transforms.userstate.get_dofn_specs`): some 30 on any DoFn, almost
    all of them beam.DoFn's own, each time it makes the ParDo, translates the graph and
    builds a bundle processor; eight times per step, about 0.6 ms each in the FnApiRunner.
    None of beam.DoFn's own methods (nor those of its bases) declares such a parameter
    (`tests/pipeline/steps/test_tagged.py` checks it), so Beam finds exactly what it found before
    among the few methods left.
    """

    def __dir__(self) -> list[str]:
        mro = type(self).__mro__
        own = mro[: mro.index(beam.DoFn)]
        return sorted({name for cls in own for name in vars(cls)} | set(vars(self)))


class _OnlyFn(StepFn):
    """(tag, value) → the value, for one tag; a tag no step receives fails the step."""

    def __init__(self, tag: str, tags: frozenset[str]) -> None:
        self._tag = tag
        self._tags = tags

    def process(self, item: tuple[str, Any]) -> Iterator[Any]:
        return _only(item, self._tag, self._tags)


class Outputs(dict):
    """{tag: PCollection}; a tag is also an attribute (``encoded.parcels``), as on Beam's
    ``DoOutputsTuple``."""

    def __getattr__(self, tag: str) -> beam.PCollection:
        try:
            return self[tag]
        except KeyError:
            raise AttributeError(f"no output tagged {tag!r}; the outputs are {sorted(self)}") \
                from None


def _only(item: tuple[str, Any], tag: str, tags: frozenset[str]) -> Iterator[Any]:
    if item[0] == tag:
        yield item[1]
    elif item[0] not in tags:  # a value no step receives would be lost without a trace
        raise ValueError(f"a step emitted the tag {item[0]!r}, which is none of {sorted(tags)}")


class SplitTags(beam.PTransform):
    """(tag, value) pairs → `Outputs`: {tag: the values of that tag}, one step per tag,
    labelled with the tag in CamelCase (``parcels`` → ``Parcels``)."""

    def __init__(self, tags: Iterable[str]) -> None:
        super().__init__()
        self._tags = list(tags)

    def expand(self, tagged: beam.PCollection) -> Outputs:
        return Outputs({
            tag: tagged | _label(tag) >> beam.ParDo(_OnlyFn(tag, frozenset(self._tags)))
            for tag in self._tags
        })


def _label(tag: str) -> str:
    return "".join(word.capitalize() for word in tag.split("_"))
