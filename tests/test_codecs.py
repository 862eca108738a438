"""`transforms.codecs`: the codec a file name says, and decompression that fails on a stream
that ends early (docs/running.md#bad-input)."""

from __future__ import annotations

import bz2
import gzip
import io

import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from transforms.codecs import CountingReader, compression_of, decompress, decompressed

_COMPRESS = {"gzip": gzip.compress, "bzip2": bz2.compress,
             "zstd": lambda data: zstandard.ZstdCompressor().compress(data)}


@pytest.mark.parametrize(("path", "expected"), [
    ("c/a.jsonl.gz", "gzip"), ("a.txt.bz2", "bzip2"), ("gs://b/x.parquet.zst", "zstd"),
    ("a.jsonl", None), ("a.gz.txt", None), ("archive.tar", None)])
def test_the_last_extension_names_the_codec(path, expected):
    assert compression_of(path) == expected


@given(data=st.binary(max_size=3000), kind=st.sampled_from(sorted(_COMPRESS)),
       frames=st.integers(1, 3))
def test_every_stream_decompresses_whole_and_its_truncation_fails(data, kind, frames):
    packed = b"".join(_COMPRESS[kind](data) for _ in range(frames))
    assert decompress(io.BytesIO(packed), kind) == data * frames
    counted = CountingReader(io.BytesIO(packed))
    assert decompress(counted, kind) == data * frames  # type: ignore[arg-type]
    assert counted.consumed == len(packed)
    with pytest.raises(EOFError):
        decompress(io.BytesIO(packed[:-1]), kind)


def test_an_uncompressed_stream_is_itself():
    f = io.BytesIO(b"abc")
    assert decompressed(f, None) is f and decompress(io.BytesIO(b"abc"), None) == b"abc"
