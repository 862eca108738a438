"""`transforms.inputs.codecs`: the codec a file name says, and decompression that fails on a stream
that ends early (docs/running.md#bad-input)."""

from __future__ import annotations

import bz2
import gzip
import io

import pytest
import zstandard
from hypothesis import assume, given
from hypothesis import strategies as st

from transforms.inputs.codecs import (
    CountingReader,
    compression_of,
    decompressed,
    stream_reader,
)

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
    assert stream_reader(io.BytesIO(packed), kind).read() == data * frames
    counted = CountingReader(io.BytesIO(packed))
    assert stream_reader(counted, kind).read() == data * frames  # type: ignore[arg-type]
    assert counted.consumed == len(packed)
    with pytest.raises(EOFError):
        stream_reader(io.BytesIO(packed[:-1]), kind).read()


def test_an_uncompressed_stream_is_itself():
    f = io.BytesIO(b"abc")
    assert decompressed(f, None) is f and stream_reader(f, None) is f


def _streamed(f: io.BytesIO | CountingReader, kind: str, block: int) -> bytes:
    reader, parts = stream_reader(f, kind), []  # type: ignore[arg-type]
    while part := reader.read(block):
        assert len(part) <= block  # never more than asked: a block at a time
        parts.append(part)
    return b"".join(parts)


@given(data=st.binary(max_size=3000), kind=st.sampled_from(sorted(_COMPRESS)),
       frames=st.integers(1, 3), block=st.integers(1, 700), cut=st.integers(1, 40))
def test_a_stream_read_a_block_at_a_time_is_whole_and_its_truncation_fails(data, kind, frames,
                                                                           block, cut):
    packed = b"".join(_COMPRESS[kind](data) for _ in range(frames))
    counted = CountingReader(io.BytesIO(packed))
    assert _streamed(counted, kind, block) == data * frames
    assert counted.consumed == len(packed)
    kept = max(len(packed) - cut, 1)
    # A cut between two whole frames leaves a whole, shorter stream: nothing to find there.
    assume(kept % (len(packed) // frames) != 0)
    with pytest.raises((EOFError, OSError)):  # a cut inside a header: not even a header
        _streamed(io.BytesIO(packed[:kept]), kind, block)


@pytest.mark.parametrize("options", [
    {}, {"write_checksum": True}, {"write_content_size": False}, {"write_dict_id": False}])
def test_a_zstd_stream_ending_inside_a_frame_fails_wherever_it_is_cut(options):
    """zstandard's own stream reader stops quietly at a cut: the frames are followed."""
    compressor = zstandard.ZstdCompressor(**options)
    data = bytes(range(256)) * 600 + b"a" * 300_000
    streamed = compressor.compressobj()
    packed = (compressor.compress(data) + streamed.compress(data) + streamed.flush()
              + b"\x50\x2a\x4d\x18" + (3).to_bytes(4, "little") + b"abc")  # a skippable frame
    assert _streamed(io.BytesIO(packed), "zstd", 1 << 16) == data * 2
    for cut in range(1, len(packed) - 11, 97):  # anywhere before the skippable frame
        with pytest.raises(EOFError):
            _streamed(io.BytesIO(packed[:cut]), "zstd", 1 << 16)


def test_bytes_that_are_not_zstd_fail():
    with pytest.raises(OSError, match="not a zstd frame"):
        _streamed(io.BytesIO(b"this is not zstd at all"), "zstd", 100)
