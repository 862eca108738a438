"""The dedup pass's key spill files (`transforms.dedup.key_spill`): records back by band, in
order."""

from __future__ import annotations

import io

import pytest

from transforms.dedup.key_spill import IDS_BAND, KeySpillWriter, read_band, read_record
from transforms.inputs.chunks import open_local


def test_records_come_back_by_band_file_by_file(tmp_path):
    paths = []
    for name, records in (("b.keys", [(0, "b0"), (IDS_BAND, ["x"]), (0, "b1")]),
                          ("a.keys", [(1, "a1"), (0, "a0")])):
        path = tmp_path / name
        with path.open("wb") as f:
            writer = KeySpillWriter(f, str(path))
            at = [writer.write(band, value) for band, value in records]
            writer.finish()
        paths.append(str(path))
    assert list(read_band(paths, 0, open_local)) == ["a0", "b0", "b1"]  # files in name order
    assert list(read_band(paths, 1, open_local)) == ["a1"]
    assert read_record(at[0], open_local) == "a1"
    assert list(read_band(paths, 7, open_local)) == []


def test_a_file_without_its_footer_is_refused(tmp_path):
    path = tmp_path / "cut.keys"
    sink = io.BytesIO()
    writer = KeySpillWriter(sink, str(path))
    writer.write(0, "x")
    writer.finish()
    path.write_bytes(sink.getvalue()[:-3])
    with pytest.raises(OSError, match="is no complete key spill file"):
        list(read_band([str(path)], 0, open_local))
