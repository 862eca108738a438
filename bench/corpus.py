"""The benchmark corpus and its SentencePiece model, built from real text that packages ship.

Sources (fetched once with the ordinary package clients, cached in ``bench/work/downloads``):

* Debian ``linux-doc-6.12``: the Linux kernel's documentation (≈ 49 MB of English technical
  prose in reStructuredText, plus its Chinese, Japanese, Korean, Italian and Spanish
  translations). One document per file. GPL-2.0.
* npm ``chinese-poetry`` 2.0.1: 全唐诗 / 全宋诗 (≈ 312 000 poems), 宋词 and 元曲 (≈ 64 MB of
  classical Chinese). One document per run of up to `POEMS_PER_DOC` consecutive poems of
  one author. MIT (the works are public domain).

Or ``--source PATH``: your own JSONL (``{"text": …}`` per line, any ``.jsonl`` under a
directory) instead of the packages.

A corpus of N MB takes an evenly spread N/total share of each source's documents (so 25 MB
looks like 100 MB, only smaller), orders them by a keyed hash of their id (English and
Chinese interleaved, reproducibly) and writes ``{"id", "text"}`` JSONL files of about
`FILE_BYTES` each. Sizes count UTF-8 bytes of text. A size beyond what the sources hold
repeats them (ids get a ``~rN`` suffix), which the report says.

The 32 000-piece unigram model (BOS 1, EOS 2, byte fallback) is trained on an evenly spread
sample of `SPM_SAMPLE_BYTES` of the 100 MB corpus' lines (about a minute on two cores), and
tokenizes every size.
Everything is cached under ``bench/work/`` and rebuilt only when missing.

    python bench/corpus.py --size-mb 25         # prints the corpus directory and model
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "MODEL_CORPUS_MB",
    "WORK",
    "build_corpus",
    "corpus_stats",
    "ensure_model",
    "is_built",
    "load_documents",
]

WORK = Path(__file__).resolve().parent / "work"
DOWNLOADS = WORK / "downloads"
FILE_BYTES = 16 << 20
POEMS_PER_DOC = 4
SPM_SAMPLE_BYTES = 12 << 20
SPM_VOCAB = 32000
MODEL_CORPUS_MB = 100.0  # every size is tokenized with the model trained on this corpus
NPM_PACKAGE = "chinese-poetry@2.0.1"
DEB_PACKAGE = "linux-doc-6.12"
CORPUS_VERSION = 1  # bump when the selection or the file layout changes

_LINUX_DOC_SKIP = re.compile(r"\.(yaml|svg|dot|sh|litmus|png|jpg|css|js|exceptions)\.gz$")


def _log(msg: str) -> None:
    print(f"[corpus] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------- fetching


def _fetch_npm() -> Path:
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    name, version = NPM_PACKAGE.split("@")
    tgz = DOWNLOADS / f"{name}-{version}.tgz"
    if not tgz.exists():
        _log(f"npm pack {NPM_PACKAGE}")
        subprocess.run(["npm", "pack", NPM_PACKAGE], cwd=DOWNLOADS, check=True,
                       stdout=subprocess.DEVNULL)
    return tgz


def _fetch_deb() -> Path:
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    found = sorted(DOWNLOADS.glob(f"{DEB_PACKAGE}_*_all.deb"))
    if not found:
        _log(f"apt-get download {DEB_PACKAGE} (run `apt-get update` first if it is not found)")
        subprocess.run(["apt-get", "download", DEB_PACKAGE], cwd=DOWNLOADS, check=True,
                       stdout=subprocess.DEVNULL)
        found = sorted(DOWNLOADS.glob(f"{DEB_PACKAGE}_*_all.deb"))
    return found[-1]


def _deb_files(deb: Path, prefix: str) -> Iterator[tuple[str, bytes]]:
    """(path, content) of files under ``prefix`` in a .deb's data.tar.* (ar + tar)."""
    data = deb.read_bytes()
    if data[:8] != b"!<arch>\n":
        raise ValueError(f"{deb} is not a .deb")
    pos = 8
    while pos < len(data):
        name = data[pos : pos + 16].decode().strip().rstrip("/")
        size = int(data[pos + 48 : pos + 58].decode().strip())
        body = data[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size & 1)
        if not name.startswith("data.tar"):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            tar_path = Path(tmp) / name
            tar_path.write_bytes(body)
            with tarfile.open(tar_path) as tf:
                for m in tf.getmembers():
                    path = m.name.removeprefix("./")
                    if m.isfile() and path.startswith(prefix):
                        f = tf.extractfile(m)
                        assert f is not None
                        yield path[len(prefix) :], f.read()


# --------------------------------------------------------------------------- documents


def _linux_docs() -> list[tuple[str, str]]:
    prefix = f"usr/share/doc/{DEB_PACKAGE}/Documentation/"
    docs = []
    for path, raw in _deb_files(_fetch_deb(), prefix):
        if not path.endswith(".gz") or _LINUX_DOC_SKIP.search(path):
            continue
        try:
            text = gzip.decompress(raw).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text.strip():
            docs.append((f"linux/{path[:-3]}", text))
    return sorted(docs)


def _poem_sort_key(name: str) -> tuple[str, int, str]:
    m = re.search(r"\.(\d+)\.json$", name)
    return (name.rsplit("/", 2)[-2], int(m.group(1)) if m else -1, name)


def _chinese_docs() -> list[tuple[str, str]]:
    wanted = re.compile(
        r"^package/dist/(quantangshi/poet\.(tang|song)\.\d+|songci/ci\.song\.\d+|yuanqu/yuanqu)"
        r"\.json$"
    )
    members: dict[str, bytes] = {}
    with tarfile.open(_fetch_npm()) as tf:
        for m in tf.getmembers():
            if m.isfile() and wanted.match(m.name):
                f = tf.extractfile(m)
                assert f is not None
                members[m.name] = f.read()
    docs = []
    for name in sorted(members, key=_poem_sort_key):
        short = name.removeprefix("package/dist/").removesuffix(".json")
        group: list[str] = []
        author = None
        first = 0
        for i, poem in enumerate(json.loads(members[name])):
            lines = [x.strip() for x in poem.get("paragraphs") or [] if x and x.strip()]
            if not lines:
                continue
            title = (poem.get("title") or poem.get("rhythmic") or "").strip()
            body = (title + "\n" if title else "") + "\n".join(lines)
            who = (poem.get("author") or "").strip()
            if group and (who != author or len(group) == POEMS_PER_DOC):
                docs.append((f"zh/{short}/{first}", "\n\n".join(group)))
                group = []
            if not group:
                first, author = i, who
                if who:
                    body = who + "\n" + body
            group.append(body)
        if group:
            docs.append((f"zh/{short}/{first}", "\n\n".join(group)))
    return docs


def _user_docs(source: Path) -> list[tuple[str, str]]:
    files = sorted(source.rglob("*.jsonl")) if source.is_dir() else [source]
    docs = []
    for f in files:
        with f.open(encoding="utf-8") as lines:
            for n, line in enumerate(lines, 1):
                if line.strip():
                    text = json.loads(line).get("text")
                    if isinstance(text, str) and text:
                        docs.append((f"{f.name}:{n}", text))
    return docs


def load_documents(source: Path | None = None) -> dict[str, list[tuple[str, str]]]:
    """Every document of every source, by source name, in a fixed order."""
    if source is not None:
        return {"user": _user_docs(source)}
    return {"linux-doc": _linux_docs(), "chinese-poetry": _chinese_docs()}


# ------------------------------------------------------------------------------ corpus


def _spread(docs: list[tuple[str, str]], fraction: float) -> list[tuple[str, str]]:
    """About ``fraction`` of ``docs``, evenly spread (every k-th, as Bresenham would)."""
    if fraction >= 1:
        return list(docs)
    return [d for i, d in enumerate(docs) if int((i + 1) * fraction) > int(i * fraction)]


def _order_key(doc_id: str) -> bytes:
    return hashlib.blake2b(doc_id.encode(), digest_size=8, person=b"tw-bench").digest()


def _corpus_dir(size_mb: float, source: Path | None) -> Path:
    tag = "pkg" if source is None else "src-" + hashlib.sha256(
        str(source.resolve()).encode()).hexdigest()[:8]
    return WORK / f"corpus-v{CORPUS_VERSION}-{tag}-{size_mb:g}mb"


def is_built(size_mb: float, source: Path | None = None) -> bool:
    """Whether the corpus of ``size_mb`` MB is already in the cache."""
    return (_corpus_dir(size_mb, source) / "stats.json").exists()


def build_corpus(size_mb: float, source: Path | None = None,
                 sources: dict[str, list[tuple[str, str]]] | None = None) -> Path:
    """The directory of a corpus of ``size_mb`` MB of text (built now unless cached)."""
    out = _corpus_dir(size_mb, source)
    if is_built(size_mb, source):
        return out
    sources = sources or load_documents(source)
    total = sum(len(t.encode()) for docs in sources.values() for _, t in docs)
    want = int(size_mb * 1e6)
    rounds, rest = divmod(want, total)
    picked: list[tuple[str, str]] = []
    for r in range(rounds + 1):
        fraction = 1.0 if r < rounds else rest / total
        for docs in sources.values():
            for doc_id, text in _spread(docs, fraction):
                picked.append((doc_id if r == 0 else f"{doc_id}~r{r}", text))
    picked.sort(key=lambda d: _order_key(d[0]))

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    files: list[list[bytes]] = []
    size = FILE_BYTES
    text_bytes = 0
    for doc_id, text in picked:
        if size >= FILE_BYTES:
            files.append([])
            size = 0
        line = (json.dumps({"id": doc_id, "text": text}, ensure_ascii=False) + "\n").encode()
        files[-1].append(line)
        size += len(line)
        text_bytes += len(text.encode())
    for i, lines in enumerate(files):
        (tmp / f"part-{i:04d}.jsonl").write_bytes(b"".join(lines))
    files_count = len(files)
    stats = {
        "documents": len(picked),
        "text_bytes": text_bytes,
        "jsonl_bytes": sum(p.stat().st_size for p in tmp.glob("*.jsonl")),
        "files": files_count,
        "repeated": rounds > 0,
        "available_text_bytes": total,
        "sources": {k: {"documents": len(v), "text_bytes": sum(len(t.encode()) for _, t in v)}
                    for k, v in sources.items()},
    }
    (tmp / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    _log(f"{out.name}: {stats['documents']} documents, {text_bytes / 1e6:.1f} MB of text, "
         f"{files_count} files{' (sources repeated)' if rounds else ''}")
    return out


def corpus_stats(corpus: Path) -> dict:
    """The ``stats.json`` written with a corpus."""
    return json.loads((corpus / "stats.json").read_text())


def ensure_model(corpus: Path) -> Path:
    """A 32k-piece unigram SentencePiece model trained on a sample of ``corpus``."""
    import sentencepiece as spm

    model = corpus.parent / f"spm-{corpus.name}-{SPM_VOCAB}.model"
    if model.exists():
        return model
    lines = []
    for path in sorted(corpus.glob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            for line in f:
                lines.extend(x for x in json.loads(line)["text"].split("\n") if x.strip())
    total = sum(len(x.encode()) for x in lines)
    sample = _spread([("", x) for x in lines], min(1.0, SPM_SAMPLE_BYTES / total))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        train = Path(tmp) / "train.txt"
        train.write_text("".join(x + "\n" for _, x in sample), encoding="utf-8")
        _log(f"training a {SPM_VOCAB}-piece unigram model on {len(sample)} lines "
             f"({train.stat().st_size / 1e6:.1f} MB)")
        spm.SentencePieceTrainer.train(
            input=str(train),
            model_prefix=str(Path(tmp) / "spm"),
            model_type="unigram",
            vocab_size=SPM_VOCAB,
            character_coverage=0.9995,
            byte_fallback=True,
            unk_id=0,
            bos_id=1,
            eos_id=2,
            pad_id=-1,
            max_sentence_length=1 << 16,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
        )
        shutil.copyfile(Path(tmp) / "spm.model", model)
    _log(f"trained {model.name} in {time.monotonic() - started:.0f} s")
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=100, help="MB of text. Default: 100.")
    parser.add_argument("--source", type=Path, default=None,
                        help="Your own JSONL file or directory instead of the packages.")
    args = parser.parse_args(argv)
    missing = not (is_built(args.size_mb, args.source) and is_built(MODEL_CORPUS_MB, args.source))
    sources = load_documents(args.source) if missing else None
    print(build_corpus(args.size_mb, args.source, sources))
    print(ensure_model(build_corpus(MODEL_CORPUS_MB, args.source, sources)))


if __name__ == "__main__":
    main()
