"""Hostile manifests, layout caches and sampler states: nothing outside the cache directory
changes, and every refusal is a clean ``ValueError``/``OSError`` naming what is wrong."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reader import WindowDataset
from reader.data.layout import LAYOUT_VERSION
from reader.prepare import main as prepare_main
from tests.common.reader_data import edit_manifest, random_docs, write_docs


def tree_digest(root: Path) -> dict[str, str]:
    """Every file and directory under ``root``, with its bytes' SHA-256 (or "dir")."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = "dir"
        for f in filenames:
            path = os.path.join(dirpath, f)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A temporary directory with a short path: under pytest's own, this test's victim is 65
    characters long from pytest's tenth run on (``pytest-10/…``), too long for a padded
    absolute path to fit in 64."""
    directory = Path(tempfile.mkdtemp(prefix="tw-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def make_victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "precious.txt").write_text("precious\n")
    (victim / "sub" / "notes.txt").write_text("notes\n")
    return victim


def padded(victim: Path, cache: Path, absolute: bool) -> str:
    """The victim directory written as a 64-character 'SHA-256' (padded with '/'): absolute,
    or relative to the cache's layouts (both escape it through ``os.path.join``)."""
    layouts = cache / f"layouts-v{LAYOUT_VERSION}"
    text = str(victim) if absolute else os.path.relpath(victim, layouts)
    if len(text) > 64:
        pytest.skip(f"the temporary path {text} is longer than 64 characters")
    return text + "/" * (64 - len(text))


@pytest.mark.parametrize("entry", ["getitem", "prepare"])
@pytest.mark.parametrize("absolute", [False, True])
def test_sha_path(small: tuple[Path, list], short_tmp: Path, isolated_cache: Path, entry: str,
                  absolute: bool) -> None:
    """A manifest's shards[i].sha256 is validated before it names a directory."""
    root, _ = small
    victim = make_victim(short_tmp)
    before = tree_digest(victim)
    edit_manifest(root, lambda m: m["shards"][0].update(
        sha256=padded(victim, isolated_cache, absolute)))
    with pytest.raises(ValueError, match=r"shards\[0\]\.sha256 must be 64 lowercase hex"):
        if entry == "getitem":
            WindowDataset(root)[0]
        else:
            prepare_main([str(root)])
    assert tree_digest(victim) == before


@pytest.mark.parametrize("file", ["../part-00000-of-00003.parquet", "/etc/passwd",
                                  "sub/part-00000-of-00003.parquet",
                                  "part-00000-of-00003.parquet/"])
def test_a_shard_name_with_a_separator_is_refused(small: tuple[Path, list], file: str) -> None:
    root, _ = small
    edit_manifest(root, lambda m: m["shards"][0].update(file=file))
    with pytest.raises(ValueError, match=r"shards\[0\]\.file must be"):
        WindowDataset(root)


# -- hostile manifests and states, generated -----------------------------------------------

import atexit  # noqa: E402
import contextlib  # noqa: E402
import copy  # noqa: E402
import io  # noqa: E402

from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from reader import EpochSampler, PackedSampler  # noqa: E402
from reader.tools import inspect  # noqa: E402
from transforms.dataset.manifest import MANIFEST_NAME  # noqa: E402

# A short path (a padded absolute path must fit in 64 characters), removed at exit.
_BASE = Path(tempfile.mkdtemp(prefix="tw-hostile-"))
atexit.register(shutil.rmtree, _BASE, True)
_VICTIM = make_victim(_BASE)
_DATA = _BASE / "ds"
write_docs(_DATA, random_docs(20, seed=3), window=6, stride=4, score_new=True, num_shards=3)
_GOOD = json.loads((_DATA / MANIFEST_NAME).read_text())
_CACHE = _BASE / "cache"
_DELETE = object()
# The values that become paths or indices come up most often.
_PATHS = [*[("shards", i, "sha256") for i in range(3)] * 3, ("shards", 0, "file"),
          ("shards", 1, "file"), ("split", "name"), ("shards", 2, "rows"),
          ("shards", 0, "scored_targets"), ("shards", 1, "documents"), ("shards", 0),
          ("shards",), ("counts", "windows"), ("counts", "pairs"), ("counts", "tokens"),
          ("counts", "documents_without_windows"), ("counts", "skipped"),
          ("counts", "uncovered_pairs"), ("tokenizer", "vocab_size"), ("tokenizer", "bos_id"),
          ("tokenizer", "eos_id"), ("tokenizer", "kind"), ("tokenizer", "sha256"),
          ("tokenizer", "path"), ("tokenizer", "file"), ("windows", "window"),
          ("windows", "stride"), ("windows", "tail"), ("windows", "seed"),
          ("windows", "offset"), ("fingerprint",), ("split",), ("sample",), ("format_version",)]
_PATHLIKE = [str(_VICTIM) + "/" * (64 - len(str(_VICTIM))) if len(str(_VICTIM)) < 64 else "/",
             os.path.relpath(_VICTIM, _CACHE / f"layouts-v{LAYOUT_VERSION}").ljust(64, "/"),
             "../" * 21 + "x", str(_VICTIM), "/" * 64, "." * 64, "A" * 64, "0" * 64,
             "part-00000-of-00003.parquet", "part-00009-of-00003.parquet", "../victim",
             "val", "..", str(_VICTIM / "precious.txt")]
_VALUES = st.one_of(
    st.sampled_from(_PATHLIKE), st.sampled_from(_PATHLIKE), st.none(), st.booleans(),
    st.integers(-2**70, 2**70), st.integers(-3, 300),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=70),
    st.sampled_from(_PATHLIKE), st.lists(st.integers(-2, 2), max_size=3),
    st.dictionaries(st.sampled_from(["name", "file", "rows", "sha256", "x"]),
                    st.one_of(st.integers(-1, 5), st.sampled_from(_PATHLIKE)), max_size=3),
    st.just(_DELETE))


def _mutate(manifest: dict, path: tuple, value: object) -> None:
    target: object = manifest
    for key in path[:-1]:
        if isinstance(target, dict) and key in target or (
                isinstance(target, list) and isinstance(key, int) and key < len(target)):
            target = target[key]  # type: ignore[index]
        else:
            return
    last = path[-1]
    if isinstance(target, dict):
        if value is _DELETE:
            target.pop(last, None)
        else:
            target[last] = value
    elif isinstance(target, list) and isinstance(last, int) and last < len(target):
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value


def _clean(e: BaseException) -> bool:
    """A refusal a user can act on: ValueError/OSError with a message."""
    event(type(e).__name__)
    return isinstance(e, (ValueError, OSError)) and len(str(e)) > 10


@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.sampled_from(_PATHS), _VALUES), min_size=1, max_size=3))
def test_hostile_manifests_change_nothing_outside_the_cache(edits: list) -> None:
    before_victim, before_data = tree_digest(_VICTIM), tree_digest(_DATA)
    manifest = copy.deepcopy(_GOOD)
    for path, value in edits:
        _mutate(manifest, path, value)
    work = _BASE / "work"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(_DATA, work)
    try:
        text = json.dumps(manifest)
    except (ValueError, TypeError):
        text = json.dumps(manifest, default=str)
    (work / MANIFEST_NAME).write_text(text)
    before_work = tree_digest(work)
    for verify in (False, True):
        try:
            ds = WindowDataset(work, verify, cache_dir=_CACHE)
            for i in (0, len(ds) - 1):
                if 0 <= i < len(ds):
                    ds[i]
            ds.__getitems__(list(range(len(ds))))
            ds.blocks("row_group")
        except Exception as e:  # noqa: BLE001 - the test is that every failure is clean
            assert _clean(e), repr(e)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            prepare_main([str(work), "--cache-dir", str(_CACHE)])
        except Exception as e:  # noqa: BLE001
            assert _clean(e), repr(e)
        code = inspect.run([str(work), "--check", "--decode", "2", "--json"])
    assert code in (0, 1, 2)
    assert tree_digest(_VICTIM) == before_victim
    assert tree_digest(_DATA) == before_data and tree_digest(work) == before_work


_STATE_KEYS = ["format", "version", "seed", "n", "drop_last", "epoch", "cursor", "targets_seen",
               "batches_seen", "order", "blocks", "fingerprint", "global_batch", "world_size",
               "lengths_sha256", "seq_len", "open_rows", "rows_per_batch"]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["epoch", "packed"]),
       st.lists(st.tuples(st.sampled_from(_STATE_KEYS), _VALUES), min_size=1, max_size=3))
@pytest.mark.slow
def test_hostile_sampler_states_are_refused_cleanly(kind: str, edits: list) -> None:
    def make() -> EpochSampler | PackedSampler:
        if kind == "epoch":
            return EpochSampler(30, 4, seed=1, fingerprint="f" * 64)
        return PackedSampler([3, 1, 4, 1, 5, 2, 6] * 3, 2, 8, seed=1, fingerprint="f" * 64)

    sampler = make()
    next(iter(sampler))
    state = dict(sampler.state_dict())
    for key, value in edits:
        _mutate(state, (key,), value)
    fresh = make()
    try:
        fresh.load_state_dict(state)
        batches = list(fresh)
    except Exception as e:  # noqa: BLE001
        assert _clean(e), repr(e)
        return
    n = 30 if kind == "epoch" else 21
    assert all(0 <= i < n for b in batches for i in (b if kind == "epoch" else sum(b, [])))
