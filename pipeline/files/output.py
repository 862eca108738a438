"""The output directory: the job's claim on it, what --overwrite replaces, and cleanup.

A job claims ``OUTPUT/.claim`` before any work (create-if-absent where the file system has
it), so a second job into the same directory stops at once; the claim names the attempt,
its fingerprint, host, pid and start. The job writes its dataset in its staging directory
and its last step swaps it with what OUTPUT holds (`pipeline.files.commit`), so ``--overwrite``
never deletes the previous dataset before the new one is complete. At launch ``--overwrite``
accepts only what the old manifest lists (its shards, its reject files, the manifest itself)
and what a killed job's claim accounts for (its temporary directory, the shards carrying its
fingerprint: those are deleted); anything else is refused, naming it, and so is anything
below OUTPUT that is not a regular file or a directory (a FIFO is never opened). A job that
fails or is interrupted leaves OUTPUT as it found it (`release`), so the same command can
simply run again.

A split job (``--split``) claims OUTPUT as a whole and writes its splits in OUTPUT/NAME/:
the old dataset is what ``_splits.json`` and each split's manifest list; a killed job's
files are also the shards (and split manifests) that carry one of its split fingerprints
(`transforms.plan.splits.split_fingerprint`).

Every access goes through `pipeline.files.fs`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import socket
import time
from typing import TYPE_CHECKING

from pipeline.files import commit, confine, fs
from pipeline.files.errors import OutputInUse, OutputRefused
from transforms.dataset.manifest import (
    LEGACY_MANIFEST_NAME,
    MANIFEST_NAME,
    parse_splits_record,
    read_manifest,
)
from transforms.dataset.schema import (
    CLAIM_NAME,
    FINGERPRINT_KEY,
    LEGACY_REJECTS_DIR,
    REJECT_REASONS,
    REJECTS_DIR,
    SHARD_PATTERN,
    TMP_DIR,
)
from transforms.inputs.names import shown_name
from transforms.plan.splits import SPLITS_NAME, split_fingerprint

if TYPE_CHECKING:  # the launcher's record; this package is below the launcher
    from pipeline.launch.options import JobConfig

__all__ = [
    "Claim",
    "absolute",
    "check_claim",
    "check_outside_inputs",
    "claim_output",
    "dataset_files",
    "read_claim",
    "release",
    "remove_emptied_dirs",
    "remove_job_files",
    "shard_fingerprint",
]

_LOG = logging.getLogger("token_windows")


def _claim_text(attempt: str, fingerprint: str, *, made_dirs: int) -> bytes:
    # made_dirs: how many levels of OUTPUT's path the job made (OUTPUT itself, its parents),
    # which a failed job removes again (those left empty).
    return json.dumps({"attempt": attempt, "fingerprint": fingerprint,
                       "host": socket.gethostname(), "pid": os.getpid(),
                       "made_dirs": made_dirs,
                       "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, sort_keys=True).encode()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Claim:
    """``OUTPUT/.claim`` as read (`read_claim`): the attempt that holds the output, its job's
    fingerprint, host, pid and start, and how many levels of OUTPUT's path the job made. A
    claim is never refused: what is absent, unreadable or of another type is None (all of
    them: a claim of an unknown job)."""

    attempt: str | None = None
    fingerprint: str | None = None
    host: str | None = None
    pid: int | None = None
    started: str | None = None
    made_dirs: int | None = None

    @classmethod
    def from_json(cls, value: object) -> Claim:
        """The claim a JSON value holds (no claim's fields when it is not an object)."""
        if not isinstance(value, dict):
            return cls()
        texts = {k: v for k in ("attempt", "fingerprint", "host", "started")
                 if isinstance(v := value.get(k), str)}
        counts = {k: v for k in ("pid", "made_dirs")
                  if isinstance(v := value.get(k), int) and not isinstance(v, bool)}
        return cls(**texts, **counts)

    def holder(self) -> str:
        """Who holds the output, in words (``?`` for what the claim does not say)."""
        def shown(value: str | int | None) -> str | int:
            return "?" if value is None else value

        return (f"attempt {shown(self.attempt)}, pid {shown(self.pid)} on {shown(self.host)}, "
                f"since {shown(self.started)}")


def read_claim(output: str) -> Claim | None:
    """The claim on ``output`` (an unknown job's if unreadable), None if there is none.

    Raises:
        fs.NotRegularFileError: ``OUTPUT/.claim`` is a FIFO, device, socket or directory,
            which is never opened (a FIFO would block the launch for ever).
    """
    path = fs.join(output, CLAIM_NAME)
    if not confine.is_local(path) and not fs.exists(path):
        return None
    try:
        found = json.loads(fs.read_regular(path))
    except FileNotFoundError:  # locally: no claim
        return None
    except fs.NotRegularFileError:
        raise
    except Exception:  # unreadable: still a claim, of an unknown job
        found = None
    return Claim.from_json(found)


def _take_claim(config: JobConfig, attempt: str, fingerprint: str, *,
                made_dirs: int) -> Claim | None:
    """Claim the output for this job; returns the stale claim taken over (--overwrite)."""
    path = fs.join(config.output, CLAIM_NAME)
    stale = read_claim(config.output)
    if stale is not None:
        who = stale.holder()
        if not config.overwrite:
            raise OutputInUse(
                f"--output {config.output} is claimed by another job ({who}; {path}): wait for "
                "it to finish; if it was killed, pass --overwrite to take its claim over"
            )
        fs.delete([path], root=config.output)
        _LOG.warning("--overwrite: took over the claim %s left by %s", path, who)
    try:
        fs.claim(path, _claim_text(attempt, fingerprint, made_dirs=made_dirs),
                 root=config.output)
    except FileExistsError:
        raise OutputInUse(
            f"--output {config.output} was claimed by another job a moment ago ({path}): two "
            "jobs cannot write one output; wait for it or choose another directory"
        ) from None
    return stale


def shard_fingerprint(path: str) -> str | None:
    import pyarrow.parquet as pq

    try:
        # Locally a FIFO or device is never opened (`pipeline.files.fs.open_regular_fd`).
        with (os.fdopen(fs.open_regular_fd(path.removeprefix("file://")), "rb")
              if confine.is_local(path) else fs.open_raw(path)) as f:
            meta = pq.ParquetFile(f).metadata.metadata or {}
    except Exception:  # not a readable Parquet file: accounted for by nothing
        return None
    return meta.get(FINGERPRINT_KEY.encode(), b"").decode() or None


def dataset_files(out: str, entries: list[str]) -> set[str]:
    """The files of ``entries`` that make up the dataset in ``out``: each manifest and what
    it lists (shards, reject files), and a split job's ``_splits.json`` with its splits'.

    Raises:
        ValueError: a manifest cannot be read, so the dataset's files cannot be told apart.
    """
    ours: set[str] = set()
    for name, rejects_dir in ((MANIFEST_NAME, REJECTS_DIR),
                              (LEGACY_MANIFEST_NAME, LEGACY_REJECTS_DIR)):
        manifest_path = fs.join(out, name)
        if manifest_path not in entries:
            continue
        try:
            old = read_manifest(fs.read_regular(manifest_path), where=manifest_path)
        except ValueError as e:
            raise OutputRefused(
                f"--overwrite: {e}; the old dataset's files cannot be told apart, so nothing "
                "was replaced: clear the directory yourself or choose another"
            ) from None
        ours.add(manifest_path)
        ours.update(fs.join(out, s.file) for s in old.shards)
        ours.update(fs.join(out, rejects_dir, f"{r}.jsonl") for r in old.counts.skipped)
    ours.update(_old_splits(out, entries))
    return {e for e in entries if e in ours}


def _leftovers(config: JobConfig, entries: list[str], stale: Claim | None,
               attempt: str) -> set[str]:
    """The files of ``entries`` that are no dataset's but a job's: the claim, this job's
    temporary directory and, when --overwrite took a killed job's claim over, that job's
    temporary directory and what it wrote beside it (the shards that carry its fingerprint,
    reject files)."""
    out = config.output
    ours: set[str] = {fs.join(out, CLAIM_NAME)}
    prefixes = [fs.join(out, TMP_DIR, attempt) + "/"]
    if stale is not None and stale.attempt:
        prefixes.append(fs.join(out, TMP_DIR, stale.attempt) + "/")
        fingerprint = stale.fingerprint
        for e in entries:
            rel = e[len(out):].lstrip("/")
            if SHARD_PATTERN.match(rel) and fingerprint and shard_fingerprint(e) == fingerprint:
                ours.add(e)
            if rel in {f"{REJECTS_DIR}/{r}.jsonl" for r in REJECT_REASONS}:
                ours.add(e)
        if fingerprint:
            ours.update(_split_files(out, entries, fingerprint))
    return {e for e in entries if e in ours or e.startswith(tuple(prefixes))}


def _old_splits(out: str, entries: list[str]) -> set[str]:
    """What an old split job's ``_splits.json`` and its splits' manifests account for."""
    path = fs.join(out, SPLITS_NAME)
    if path not in entries:
        return set()
    try:
        record = parse_splits_record(fs.read_regular(path), where=path)
        found = {path}
        found.update(fs.join(out, REJECTS_DIR, f"{r}.jsonl") for r in record.counts.skipped)
        for split in record.splits:
            directory = fs.join(out, split.dir)
            manifest = fs.join(directory, MANIFEST_NAME)
            if manifest in entries:
                old = read_manifest(fs.read_regular(manifest), where=manifest)
                found.add(manifest)
                found.update(fs.join(directory, s.file) for s in old.shards)
    except ValueError as e:
        raise OutputRefused(
            f"--overwrite: {e}; the old dataset's files cannot be told apart, so nothing "
            "was deleted: clear the directory yourself or choose another"
        ) from None
    return found


def _split_files(out: str, entries: list[str], fingerprint: str) -> set[str]:
    """The shards and manifests in OUTPUT/NAME/ that carry split NAME's fingerprint of the
    job ``fingerprint``: what that job wrote of its splits."""
    found = set()
    for e in entries:
        name, _, rest = e[len(out):].lstrip("/").partition("/")
        if not rest or "/" in rest:
            continue
        mine = split_fingerprint(fingerprint, name)
        if SHARD_PATTERN.match(rest) and shard_fingerprint(e) == mine:
            found.add(e)
        elif rest == MANIFEST_NAME:
            try:
                theirs = read_manifest(fs.read_regular(e), where=e).fingerprint
            except ValueError:
                continue
            if theirs == mine:
                found.add(e)
    return found


def remove_emptied_dirs(output: str, removed: list[str]) -> None:
    """Local file systems: the directories below OUTPUT (a split's, ``_rejects``) that moving
    or deleting ``removed`` left empty (never one that held none of them)."""
    if fs.scheme(output) not in (None, "file") or not os.path.isdir(output):
        return
    top = output.removeprefix("file://").rstrip("/")
    names = {e[len(output):].lstrip("/").split("/")[0] for e in removed if "/" in
             e[len(output):].lstrip("/")}
    for name in sorted(names - {TMP_DIR}):
        path = os.path.join(top, name)
        if os.path.isdir(path) and not os.path.islink(path):
            with contextlib.suppress(OSError):
                os.rmdir(path)  # only if empty


def _refuse_a_split_of_another_job(output: str) -> None:
    """A split of a split job (OUTPUT/val) is that job's to rewrite: a job of its own there
    would leave the job's ``_splits.json`` describing a dataset that is gone."""
    parent, name = fs.split(output)
    record_path = fs.join(parent or ".", SPLITS_NAME)
    if not fs.is_file(record_path):
        return
    try:
        record = parse_splits_record(fs.read_regular(record_path), where=record_path)
    except ValueError:  # not a record of ours: nothing to protect
        return
    names = [s.name for s in record.splits]
    if name in names:
        raise OutputRefused(
            f"--output {output} is the split {name} of the job in {parent} ({SPLITS_NAME}): "
            f"rerun that job (--output {parent} --overwrite), or choose another directory"
        )


def claim_output(config: JobConfig, attempt: str, fingerprint: str) -> None:
    """Claim the output, and make sure it is empty or (--overwrite) holds only a dataset and
    what a killed job left. Raises ValueError (and releases the claim).

    The old dataset is not touched: the job writes its own in its staging directory, and its
    last step swaps them (`pipeline.files.commit`). What a killed job left (its temporary directory,
    the shards that carry its fingerprint) is deleted; a swap it left half done is undone
    first (on an object store, finished).

    Before anything is written: an OUTPUT holding a symbolic link below it, or anything that
    is neither a directory nor a regular file (a FIFO would block the launch for ever), or
    on an object store a key with an empty, ``.`` or ``..`` segment, is refused
    (`pipeline.files.confine`).
    """
    confine.check_output_path(config.output)
    if fs.is_file(config.output):
        raise OutputRefused(
            f"--output {config.output} is a file, not a directory: choose a directory"
        )
    confine.check_output_tree(
        config.output, None if confine.is_local(config.output) else fs.list_dir(config.output))
    _refuse_a_split_of_another_job(config.output)
    stale = _take_claim(config, attempt, fingerprint, made_dirs=_missing_levels(config.output))
    try:
        if stale is not None and stale.attempt:
            _recover(config.output, stale.attempt)
        claim = fs.join(config.output, CLAIM_NAME)
        entries = [e for e in fs.list_dir(config.output) if e != claim]
        if not entries:
            return
        rel = [e[len(config.output) :].lstrip("/") for e in entries]
        if not config.overwrite:
            raise OutputRefused(
                f"--output {config.output} already holds {len(entries)} files (e.g. "
                f"{shown_name(rel[0])}); pass --overwrite to replace that dataset, or choose "
                "another directory"
            )
        dataset = dataset_files(config.output, entries)
        leftovers = _leftovers(config, entries, stale, attempt) - dataset
        foreign = [r for e, r in zip(entries, rel, strict=True)
                   if e not in dataset and e not in leftovers]
        if foreign:
            raise OutputRefused(
                f"--output {config.output} holds {len(foreign)} files that no manifest (nor a "
                f"killed job's claim) accounts for, e.g. {shown_name(foreign[0])}; --overwrite "
                "replaces only the old dataset's own files: move them away, or choose another "
                "directory"
            )
        if leftovers:
            fs.delete(sorted(leftovers), root=config.output)
            remove_emptied_dirs(config.output, sorted(leftovers))
            _LOG.info("--overwrite: deleted the %d files a killed job left in %s",
                      len(leftovers), config.output)
    except BaseException:
        remove_job_files(config.output, fs.join(config.output, TMP_DIR, attempt), attempt)
        raise


def _missing_levels(output: str) -> int:
    """How many levels of the local path ``output`` do not exist yet (0 on object stores)."""
    if not confine.is_local(output):
        return 0
    path, levels = os.path.abspath(output.removeprefix("file://")), 0
    while not os.path.lexists(path) and os.path.dirname(path) != path:
        path, levels = os.path.dirname(path), levels + 1
    return levels


def _remove_made_dirs(output: str, levels: int | None) -> None:
    """Remove the ``levels`` directories of OUTPUT's path the job made, those left empty
    (None: the claim does not say)."""
    if levels is None or not confine.is_local(output):
        return
    path = os.path.abspath(output.removeprefix("file://"))
    for _ in range(levels):
        if not os.path.isdir(path) or os.path.islink(path) or os.listdir(path):
            return
        os.rmdir(path)
        path = os.path.dirname(path)


def _recover(output: str, attempt: str) -> None:
    """A killed job's swap (`pipeline.files.commit`): undone on a local disk, where its old files
    wait in its temporary directory; finished on an object store, where they are gone."""
    tmp_dir = fs.join(output, TMP_DIR, attempt)
    if commit.journal_of(tmp_dir) is None:
        return
    if confine.is_local(output):
        commit.undo(output, tmp_dir)
        _LOG.warning("--overwrite: undid the half-done swap of the killed job %s in %s",
                     attempt, output)
    else:
        commit.finish(output, tmp_dir)
        _LOG.warning("--overwrite: finished the half-done swap of the killed job %s in %s",
                     attempt, output)


_GLOB = re.compile(r"\*\*|\*|\?|\[[^\]]*\]")


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Beam's glob as a regex: ``**`` crosses directories, ``*`` and ``?`` do not."""
    out, last = [], 0
    for m in _GLOB.finditer(pattern):
        out.append(re.escape(pattern[last : m.start()]))
        tok = m.group()
        out.append(".*" if tok == "**" else "[^/]*" if tok == "*" else "[^/]" if tok == "?"
                   else tok)
        last = m.end()
    out.append(re.escape(pattern[last:]))
    return re.compile("".join(out) + r"\Z")


def absolute(path: str) -> str:
    return os.path.abspath(path) if fs.scheme(path) is None else path


def check_outside_inputs(config: JobConfig) -> None:
    out = absolute(config.output).rstrip("/")
    probes = [f"{out}/{name}" for name in (MANIFEST_NAME, "part-00000-of-00001.parquet",
                                          f"{REJECTS_DIR}/empty.jsonl", CLAIM_NAME,
                                          f"{TMP_DIR}/a/b")]
    for name in config.splits.names:
        probes += [f"{out}/{name}/{MANIFEST_NAME}", f"{out}/{name}/part-00000-of-00001.parquet"]
    for pattern in config.inputs:
        regex = _glob_regex(absolute(pattern))
        if any(regex.match(p) for p in probes):
            raise OutputRefused(
                f"--output {config.output} lies where --input {pattern} matches: the job would "
                "read its own output; choose an output outside the input pattern"
            )


def release(config: JobConfig, *, attempt: str | None, tmp_dir: str) -> None:
    """After a failure or an interruption: leave OUTPUT as the job found it.

    The job wrote nothing outside its temporary directory unless its last step had begun the
    swap (`pipeline.files.commit`): a local swap is undone, so the old dataset is back, file for
    file. Then the temporary directory (the staging, the spill files) and the claim go, and
    an OUTPUT the job made itself (and the parents it made), if empty. All of it under the
    claim's lock, so a swap cannot run meanwhile. A job that is killed cannot, and leaves a
    stale claim that --overwrite takes over (undoing what it left).
    """
    if attempt is None:
        return
    output = config.output
    try:
        with commit.holding_claim(output, attempt) as ours:
            if not ours:  # another job took the claim over: only our own directory is ours
                remove_job_files(output, tmp_dir, None)
                return
            claim = read_claim(output) or Claim()
            if not commit.undo(output, tmp_dir):
                _LOG.warning(
                    "the swap into %s had begun: it holds no manifest until the next run "
                    "with --overwrite finishes it (from %s)", output, tmp_dir)
                return
            try:
                aborted = fs.abort_uploads(tmp_dir)
            except Exception as e:  # the job's own error matters more
                aborted = 0
                _LOG.warning("could not abort the uploads this job began in %s: %s", tmp_dir, e)
            if aborted:
                _LOG.info("aborted the %d uploads this job had begun in %s", aborted, tmp_dir)
            remove_job_files(output, tmp_dir, attempt)
            _remove_made_dirs(output, claim.made_dirs)  # a failed job leaves no trace
    except Exception as e:  # the job's own error matters more
        _LOG.warning("could not remove this job's temporary files and claim in %s: %s",
                     output, e)


def check_claim(output: str, attempt: str | None) -> None:
    """Fail unless ``OUTPUT/.claim`` still holds this job's attempt id (None: not claimed)."""
    if attempt is None:
        return
    path = fs.join(output, CLAIM_NAME)
    try:
        holder = json.loads(fs.read_regular(path)).get("attempt")
    except Exception:  # gone, or not ours
        holder = None
    if holder != attempt:
        raise RuntimeError(
            f"{output} is no longer claimed by this job (attempt {attempt}; the claim "
            f"{path} now holds {holder or 'nothing'}): another job took it over; no manifest "
            "was written"
        )


def remove_job_files(output: str, tmp_dir: str, attempt: str | None) -> None:
    """Remove this job's temporary directory and, if it holds it, its claim on ``output``."""
    # A local tree goes at once (`pipeline.files.confine.delete`), not file by file; an object
    # store has no directories, so its keys are listed.
    local = fs.scheme(tmp_dir) in (None, "file")
    found = [] if local else fs.list_dir(tmp_dir)
    fs.delete(found + ([tmp_dir] if fs.exists(tmp_dir) else []), root=output)
    parent = tmp_dir.rstrip("/").rsplit("/", 1)[0]
    if fs.scheme(parent) in (None, "file") and os.path.isdir(parent) and not os.listdir(parent):
        os.rmdir(parent)  # OUTPUT/.tmp, when no other attempt's files are left in it
    if attempt is None:
        return
    claim = fs.join(output, CLAIM_NAME)
    try:
        holder = json.loads(fs.read_regular(claim)).get("attempt")
    except Exception:
        return
    if holder == attempt:
        fs.delete([claim], root=output)


