"""What a refusal is about, as a type: the data on disk, or a saved sampler state
(docs/reader.md#errors).

Every class is a ``ValueError``, so code that catches ``ValueError`` keeps working; a caller
that wants to tell "this dataset is damaged" from "I passed a wrong argument" catches the
class instead of parsing the message. Wrong arguments stay plain ``ValueError`` or
``TypeError``. The classes live here, in the pure package, because the manifest is parsed
here; ``reader`` exports them (``reader.DamagedDataset`` …).

The tree::

    ValueError
    ├── DatasetError            about the data on disk (this base: another format version)
    │   ├── DamagedDataset      bytes that do not match the manifest, footers or checksums
    │   │   ├── MissingShard        (also FileNotFoundError) a listed shard is absent
    │   │   └── NotRegularFileError (also OSError; reader.data.regular) a FIFO where a file is
    │   ├── ForeignDataset      another job's files, or a mixture source that changed
    │   └── UnfinishedDataset   (also FileNotFoundError) a directory without a manifest:
    │                           the job has not finished (no directory: FileNotFoundError)
    └── SamplerStateError       a saved sampler, mixture or trainer state that does not fit

Example::

    try:
        ds = reader.WindowDataset(path)
    except reader.UnfinishedDataset:
        wait_for_the_job()            # it writes the manifest last
    except reader.DamagedDataset:
        copy_it_again()
"""

from __future__ import annotations

__all__ = ["DamagedDataset", "DatasetError", "ForeignDataset", "MissingShard",
           "SamplerStateError", "UnfinishedDataset"]


class DatasetError(ValueError):
    """The data on disk cannot be read as a dataset (raised as such: another format version)."""


class DamagedDataset(DatasetError):
    """Bytes that do not match what the manifest, a footer or a checksum says they are."""


class MissingShard(DamagedDataset, FileNotFoundError):
    """A shard the manifest lists is not there; also a ``FileNotFoundError``, as before."""


class ForeignDataset(DatasetError):
    """Files of another job (another fingerprint or run), or a mixture source that changed."""


class UnfinishedDataset(DatasetError, FileNotFoundError):
    """A directory without a manifest (a job still running, or interrupted); also a
    ``FileNotFoundError``, as before."""


class SamplerStateError(ValueError):
    """A saved sampler, mixture or trainer state that does not fit what it is loaded into:
    another dataset or run, another release, impossible counts, another checkpoint's step."""
