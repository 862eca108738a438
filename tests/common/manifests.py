"""Manifests built from plain documents, as the writer builds them: the arguments every test
of the manifest passes, and its record as JSON."""

from __future__ import annotations

from tests.common.documents import parcels_of
from transforms.dataset.schema import shard_file_name
from transforms.params import WindowSpec
from transforms.shards.manifest_build import WrittenShard, build_manifest
from transforms.shards.rows import ShardRows
from transforms.tokenize.tokenizers import ByteTokenizer

TOK = ByteTokenizer()
SPEC = WindowSpec(window=4, stride=4)


def shard(index, num_shards, docs):
    return WrittenShard(file=shard_file_name(index, num_shards), index=index, sha256="0" * 64,
                        bytes=1 + index, counts=ShardRows(parcels_of(docs)).counts)


ARGS = dict(tokenizer=TOK.info(), windows=SPEC, inputs=["x"], reading={},
            row_group_rows=16, versions={"pyarrow": "0"})


# ARGS as the manifest records them.
ARGS_JSON = {**ARGS, "tokenizer": TOK.info().to_json(), "windows": SPEC.to_json()}


def built(**kwargs):
    """`build_manifest`'s record as its JSON object."""
    return build_manifest(**kwargs).to_json()
