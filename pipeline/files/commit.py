"""The new dataset replaces the old one only when it is complete (docs/integrity.md).

The job writes its whole dataset (shards, reject files, manifests) into a staging directory,
``OUTPUT/.tmp/<attempt>/new/``, laid out as it will be in OUTPUT; readers skip it (a name
that starts with ``.``, as Spark, Hive and pyarrow's dataset discovery do). Until the last
step, OUTPUT holds exactly what it held before the job. The last step then `swap`\\ s, the
way Hadoop's output committers move a task's attempt directory into place and Delta makes a
version visible by one atomic rename:

1. a journal, ``OUTPUT/.tmp/<attempt>/commit.json``, lists the old files to set aside and
   the new files to move in, in order;
2. on a local disk the old dataset's files are renamed into ``OUTPUT/.tmp/<attempt>/old/``,
   manifests first, then the new files are renamed into OUTPUT, manifests last (each
   ``rename(2)`` is atomic; the whole takes milliseconds); the job then removes its temporary
   directory, and with it the old files;
3. on an object store (no rename: a copy and a delete) the old manifests are deleted, the new
   files are copied into place, manifests last, and then the old files that the new dataset
   does not replace are deleted.

A swap that is interrupted on a local disk is undone (`undo`): the new files go back to
staging and the old ones back to their places, byte for byte the same files (renames, not
copies). The launcher's cleanup after a failure (`pipeline.files.output.release`) undoes it; so
does the next ``--overwrite`` when the job was killed outright. While a swap or its undo
runs on a local disk it holds an exclusive ``flock`` on the job's claim, so the launcher's
cleanup and the last step never move the same files at once.

Example (local): ``out`` holds ``_manifest.json`` and ``part-00000-of-00001.parquet``; a job
with ``--overwrite`` writes its own into ``out/.tmp/3f2a…/new/``, and only its last step moves
the old two into ``out/.tmp/3f2a…/old/`` and the new two into ``out``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Sequence

from pipeline.files import confine, fs
from transforms.dataset.manifest import LEGACY_MANIFEST_NAME, MANIFEST_NAME
from transforms.dataset.schema import CLAIM_NAME
from transforms.plan.splits import SPLITS_NAME

__all__ = [
    "ASIDE",
    "JOURNAL",
    "STAGE",
    "finish",
    "holding_claim",
    "journal_of",
    "order_new",
    "order_old",
    "staging_dir",
    "swap",
    "undo",
]

STAGE = fs.STAGE  # OUTPUT/.tmp/<attempt>/new: the new dataset until the swap
ASIDE = "old"  # OUTPUT/.tmp/<attempt>/old: the old dataset's files during a local swap
JOURNAL = "commit.json"

_TOP = (SPLITS_NAME, MANIFEST_NAME, LEGACY_MANIFEST_NAME)


def staging_dir(tmp_dir: str) -> str:
    """Where the job writes its dataset before the swap: ``tmp_dir/new``."""
    return fs.join(tmp_dir, STAGE)


def _manifest_rank(rel: str) -> int:
    """0: a data file; 1: a split's manifest; 2: a top manifest; 3: ``_splits.json``."""
    if rel == SPLITS_NAME:
        return 3
    if rel in _TOP:
        return 2
    return 1 if rel.rsplit("/", 1)[-1] == MANIFEST_NAME else 0


def order_new(rels: Sequence[str]) -> list[str]:
    """The new files in the order they move in: data first, the manifests last (a split job's
    ``_splits.json`` the very last), so a manifest never names a file not yet in place."""
    return sorted(rels, key=lambda r: (_manifest_rank(r), r))


def order_old(rels: Sequence[str]) -> list[str]:
    """The old files in the order they go: the manifests first, so that OUTPUT never holds
    an old manifest whose files are gone."""
    return sorted(rels, key=lambda r: (-_manifest_rank(r), r))


def journal_of(tmp_dir: str) -> dict[str, list[str]] | None:
    """The swap journal of the job whose temporary directory is ``tmp_dir``; None if it has
    none (its swap never began) or it is unreadable."""
    path = fs.join(tmp_dir, JOURNAL)
    try:  # absent, or not a regular file (never opened then): no journal
        found = json.loads(fs.read_regular(path))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or not all(
            isinstance(found.get(k), list) and all(isinstance(r, str) for r in found[k])
            for k in ("old", "new")):
        return None
    return {"old": list(found["old"]), "new": list(found["new"])}


@contextlib.contextmanager
def holding_claim(output: str, attempt: str) -> Iterator[bool]:
    """Hold this job's claim on ``output`` exclusively while the body runs; yields whether the
    claim is this job's (still the same file, holding ``attempt``).

    Locally this is an exclusive ``flock`` on ``OUTPUT/.claim`` (never opened unless it is a
    regular file): the last step's swap and the launcher's cleanup after a failure take it, so
    they never move files at once. Object stores have no locks: only the claim is read.
    """
    path = fs.join(output, CLAIM_NAME)
    if not confine.is_local(path):
        yield _holds(fs.read_bytes(path) if fs.is_regular(path) else b"", attempt)
        return
    local = path.removeprefix("file://")
    try:
        fd = fs.open_regular_fd(local)
    except (OSError, ValueError):  # gone, or not a regular file: not ours
        yield False
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.stat(local, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except OSError:  # removed while we waited for the lock
            same = False
        yield same and _holds(_read_fd(fd), attempt)
    finally:
        os.close(fd)  # releases the lock


def _read_fd(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _holds(content: bytes, attempt: str) -> bool:
    try:
        found = json.loads(content)
    except ValueError:
        return False
    return isinstance(found, dict) and found.get("attempt") == attempt


def swap(output: str, tmp_dir: str, *, old: Sequence[str], new: Sequence[str]) -> None:
    """Replace the files ``old`` (paths relative to ``output``) by the staged files ``new``.

    The caller holds the claim (`holding_claim`). ``old`` must include every file of ``new``
    that exists in ``output`` already. On a local disk, an error part-way is undone before it
    is raised: OUTPUT then holds the old files again.
    """
    old, new = order_old(old), order_new(new)
    fs.write_atomically(fs.join(tmp_dir, JOURNAL),
                        lambda f: f.write(json.dumps({"old": old, "new": new}).encode()),
                        tmp_dir, root=output)
    stage, aside = staging_dir(tmp_dir), fs.join(tmp_dir, ASIDE)
    if confine.is_local(output):
        try:
            for rel in old:
                confine.rename(output, fs.join(output, rel), fs.join(aside, rel))
            for rel in new:
                confine.rename(output, fs.join(stage, rel), fs.join(output, rel))
        except BaseException:
            undo(output, tmp_dir)
            raise
        return
    # Object stores: a "rename" is a copy and a delete, and nothing makes several atomic. The
    # old dataset stops being one when its manifests go; the new one is one when its last
    # manifest lands (docs/integrity.md#on-object-stores-the-window-of-exposure).
    replaced = set(new)
    fs.delete([fs.join(output, r) for r in old if _manifest_rank(r)], root=output)
    for rel in new:
        fs.rename(fs.join(stage, rel), fs.join(output, rel), root=output)
    fs.delete([fs.join(output, r) for r in old if not _manifest_rank(r) and r not in replaced],
              root=output)


def undo(output: str, tmp_dir: str) -> bool:
    """Undo the interrupted local swap of the job whose temporary directory is ``tmp_dir``.

    Returns True if the swap had finished (the new dataset is in place and nothing is undone)
    or there was nothing to undo, False if an object store's swap had begun (it cannot be
    undone; the staged files are left for the next ``--overwrite`` to finish it).
    """
    journal = journal_of(tmp_dir)
    if journal is None or not journal["new"]:
        return True
    stage, aside = staging_dir(tmp_dir), fs.join(tmp_dir, ASIDE)
    if not fs.exists(fs.join(stage, journal["new"][-1])):
        return True  # the last manifest moved in: the swap is complete
    if not confine.is_local(output):
        return False
    for rel in reversed(journal["new"]):
        placed = fs.join(output, rel)
        if not fs.is_regular(fs.join(stage, rel)) and fs.is_regular(placed):
            confine.rename(output, placed, fs.join(stage, rel))
    for rel in reversed(journal["old"]):
        if fs.is_regular(fs.join(aside, rel)):
            confine.rename(output, fs.join(aside, rel), fs.join(output, rel))
    return True


def finish(output: str, tmp_dir: str) -> None:
    """Complete an object store's swap that was interrupted after it began: move in what is
    still staged (manifests last) and delete the old files it does not replace."""
    journal = journal_of(tmp_dir)
    if journal is None:
        return
    stage = staging_dir(tmp_dir)
    replaced = set(journal["new"])
    fs.delete([fs.join(output, r) for r in journal["old"]
               if _manifest_rank(r) and fs.exists(fs.join(output, r))], root=output)
    for rel in journal["new"]:
        if fs.exists(fs.join(stage, rel)):
            fs.rename(fs.join(stage, rel), fs.join(output, rel), root=output)
    fs.delete([fs.join(output, r) for r in journal["old"]
               if r not in replaced and fs.exists(fs.join(output, r))], root=output)
