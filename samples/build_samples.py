#!/usr/bin/env python3
"""Rebuild the sample corpus (samples/corpus/*.jsonl) and SentencePiece model (samples/spm.model).

Everything is derived from two packages fetched from ordinary package registries
(no other network access is needed):

* Debian ``r-cran-janeaustenr`` 1.0.0-1 (MIT package; the novels are public domain):
  Jane Austen's *Pride and Prejudice* and *Persuasion*.
* npm ``chinese-poetry`` 2.0.1 (MIT; the classical works are public domain):
  诗经, 论语/大学/中庸/孟子, 唐诗三百首 and 古文观止.

Install first::

    pip install sentencepiece==0.2.3
    apt-get update            # once, so that `apt-get download` can find the .deb
    # npm (any recent version) must be on PATH for `npm pack`; it is only used to fetch
    # the tarball.  R itself is NOT needed: the R lazy-load database is parsed here.

Run (from anywhere)::

    python samples/build_samples.py                # writes into samples/
    python samples/build_samples.py --out /tmp/x   # writes elsewhere (e.g. to diff)

The script downloads ``r-cran-janeaustenr_1.0.0-1_all.deb`` with ``apt-get download``
and ``chinese-poetry-2.0.1.tgz`` with ``npm pack`` into a temporary directory (or uses
``--deb PATH`` / ``--tgz PATH`` if given), checks their SHA-256, and then writes:

    corpus/en_pride_and_prejudice.jsonl   one record per chapter
    corpus/en_persuasion.jsonl            one record per chapter
    corpus/zh_shijing.jsonl               诗经, one record per poem
    corpus/zh_sishu.jsonl                 大學, 中庸 one record each; 论语/孟子 one per 篇
    corpus/zh_tangshi300.jsonl            唐诗三百首, one record per poem
    corpus/zh_guwenguanzhi.jsonl          古文观止, one record per essay
    spm.model, spm.vocab                  unigram SentencePiece model trained on the above

Each JSONL line is ``{"id": ..., "title": ..., "text": ...}`` (UTF-8, ensure_ascii=False,
paragraphs / verse lines separated by "\\n"); ids are unique and sorted within each file.
Output is deterministic: running the script twice gives byte-identical files.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import itertools
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

DEB_NAME = "r-cran-janeaustenr"
DEB_VERSION = "1.0.0-1"
DEB_FILE = f"{DEB_NAME}_{DEB_VERSION}_all.deb"
DEB_SHA256 = "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95"
RDATA_DIR = "usr/lib/R/site-library/janeaustenr/data/"

NPM_NAME = "chinese-poetry"
NPM_VERSION = "2.0.1"
NPM_FILE = f"{NPM_NAME}-{NPM_VERSION}.tgz"
NPM_SHA256 = "25b549e46919c3a0569db6b68ddc96956b04a484ea4518ad2bbd4f137e307e86"
NPM_MEMBERS = {
    "shijing": "package/dist/shijing/shijing.json",
    "lunyu": "package/dist/lunyu/lunyu.json",
    "daxue": "package/dist/sishuwujing/daxue.json",
    "zhongyong": "package/dist/sishuwujing/zhongyong.json",
    "mengzi": "package/dist/sishuwujing/mengzi.json",
    "tangshi": "package/dist/mengxue/tangshisanbaishou.json",
    "guwen": "package/dist/mengxue/guwenguanzhi.json",
}

SPM_OPTIONS = {
    "model_type": "unigram",
    "vocab_size": 8000,
    "character_coverage": 0.9995,
    "unk_id": 0,
    "bos_id": 1,
    "eos_id": 2,
    "pad_id": -1,
    "byte_fallback": True,
    # Lossless: keep text exactly as written (no NFKC, no whitespace folding), so that
    # decode(encode(text)) == text for every document in the corpus.
    "normalization_rule_name": "identity",
    "remove_extra_whitespaces": False,
    "split_digits": True,
    "max_sentence_length": 65536,
    # Determinism: one thread, use every sentence, never shuffle.
    "num_threads": 1,
    "input_sentence_size": 0,
    "shuffle_input_sentence": False,
    "minloglevel": 2,
}


# --------------------------------------------------------------------------- fetching


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(
    path: str | None, workdir: Path, fname: str, cmd: list[str], want: str
) -> Path:
    if path:
        p = Path(path)
    else:
        p = workdir / fname
        if not p.exists():
            print("+", " ".join(cmd), file=sys.stderr)
            subprocess.run(cmd, cwd=workdir, check=True, stdout=subprocess.DEVNULL)
    got = sha256(p)
    if got != want:
        print(
            f"WARNING: {p.name} sha256 {got} != expected {want}; output may differ",
            file=sys.stderr,
        )
    return p


def deb_member(deb: Path, prefix: str) -> dict[str, bytes]:
    """Files under `prefix` in a .deb's data.tar.* (pure Python: ar + tar)."""
    b = deb.read_bytes()
    assert b[:8] == b"!<arch>\n", "not a .deb"
    pos, out = 8, {}
    while pos < len(b):
        name = b[pos : pos + 16].decode().strip().rstrip("/")
        size = int(b[pos + 48 : pos + 58].decode().strip())
        data = b[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size & 1)
        if name.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tf:
                for m in tf.getmembers():
                    n = m.name.removeprefix("./")
                    if m.isfile() and n.startswith(prefix):
                        out[n[len(prefix) :]] = tf.extractfile(m).read()
    return out


# ------------------------------------------------------------- R lazy-load database


class _RUnserializer:
    """Minimal reader for R's XDR serialization (enough for character vectors/lists)."""

    def __init__(self, b: bytes):
        self.b, self.p, self.refs = b, 0, []

    def int(self) -> int:
        v = struct.unpack_from(">i", self.b, self.p)[0]
        self.p += 4
        return v

    def length(self) -> int:
        v = self.int()
        if v == -1:
            hi, lo = self.int(), self.int()
            v = (hi << 32) + lo
        return v

    def run(self):
        assert self.b[:2] == b"X\n", "not XDR-serialized R data"
        self.p = 2
        version = self.int()
        self.int(), self.int()
        if version == 3:
            n = self.int()
            self.p += n  # skip the native-encoding name
        return self.item()

    def item(self):
        flags = self.int()
        t, levels = flags & 0xFF, flags >> 12
        has_attr, has_tag = flags & (1 << 9), flags & (1 << 10)
        if t == 254:  # NILVALUE
            return None
        if t in (241, 242, 250, 251, 252, 253):
            return ("special", t)
        if t == 255:  # REFSXP
            idx = flags >> 8 or self.int()
            return self.refs[idx - 1]
        if t == 1:  # SYMSXP
            sym = ("sym", self.item())
            self.refs.append(sym)
            return sym
        if t in (2, 3, 5, 6, 17, 239, 240):  # pairlists
            if has_attr:
                self.item()
            tag = self.item() if has_tag else None
            car, cdr = self.item(), self.item()
            return [(tag, car)] + (cdr if isinstance(cdr, list) else [])
        if t == 9:  # CHARSXP
            n = self.int()
            if n == -1:
                return None
            s = self.b[self.p : self.p + n]
            self.p += n
            return s.decode("latin-1" if levels & 4 else "utf-8")
        if t in (10, 13):
            n = self.length()
            v = list(struct.unpack_from(f">{n}i", self.b, self.p))
            self.p += 4 * n
        elif t == 14:
            n = self.length()
            v = list(struct.unpack_from(f">{n}d", self.b, self.p))
            self.p += 8 * n
        elif t in (16, 19, 20):
            v = [self.item() for _ in range(self.length())]
        else:
            raise ValueError(f"unsupported R SEXP type {t}")
        attr = self.item() if has_attr else None
        if attr:
            return ("attr", v, {tag[1]: val for tag, val in attr})
        return v


def read_rdata(files: dict[str, bytes]) -> dict[str, list]:
    """Objects of an R package's data/Rdata.{rdx,rdb} lazy-load database."""
    index = _RUnserializer(gzip.decompress(files["Rdata.rdx"])).run()
    top = dict(zip(index[2]["names"], index[1]))
    _, offsets, attrs = top["variables"]
    rdb, out = files["Rdata.rdb"], {}
    for name, (off, n) in zip(attrs["names"], offsets):
        off, n = int(off), int(n)
        out[name] = _RUnserializer(zlib.decompress(rdb[off + 4 : off + n])).run()
    return out


# ----------------------------------------------------------------------- documents


CHAPTER_RE = re.compile(r"^(?:CHAPTER|Chapter) (\d+)$")


def austen_chapters(lines: list[str], slug: str) -> list[dict]:
    """Split a novel (list of hard-wrapped lines) into chapter records."""
    docs, cur, num = [], None, None

    def flush():
        if cur is None:
            return
        paras, para = [], []
        for line in cur + [""]:
            if line.strip():
                para.append(line.strip())
            elif para:
                paras.append(" ".join(para))
                para = []
        if paras:
            docs.append(
                {
                    "id": f"{slug}-ch{num:02d}",
                    "title": f"Chapter {num}",
                    "text": "\n".join(paras),
                }
            )

    for line in lines:
        line = line or ""
        m = CHAPTER_RE.match(line.strip())
        if m:
            flush()
            cur, num = [], int(m.group(1))
        elif line.strip() == "Finis":
            continue
        elif cur is not None:
            cur.append(line)
    flush()
    return docs


def _lines(xs) -> str:
    return "\n".join(x.strip() for x in xs if x and x.strip())


def shijing_docs(data) -> list[dict]:
    return [
        {
            "id": f"shijing-{i:03d}",
            "title": "·".join(x for x in (p["chapter"], p["section"], p["title"]) if x),
            "text": _lines(p["content"]),
        }
        for i, p in enumerate(data, 1)
    ]


def sishu_docs(lunyu, daxue, zhongyong, mengzi) -> list[dict]:
    docs = [
        {"id": "daxue", "title": daxue["chapter"], "text": _lines(daxue["paragraphs"])}
    ]
    docs += [
        {
            "id": f"lunyu-{i:02d}",
            "title": f"论语·{c['chapter']}",
            "text": _lines(c["paragraphs"]),
        }
        for i, c in enumerate(lunyu, 1)
    ]
    docs += [
        {
            "id": f"mengzi-{i:02d}",
            "title": f"孟子·{c['chapter']}",
            "text": _lines(c["paragraphs"]),
        }
        for i, c in enumerate(mengzi, 1)
    ]
    docs.append(
        {
            "id": "zhongyong",
            "title": zhongyong["chapter"],
            "text": _lines(zhongyong["paragraphs"]),
        }
    )
    return docs  # ids in sorted order


def tangshi_docs(data) -> list[dict]:
    docs = []
    for group in data["content"]:
        for p in group["content"]:
            title = p["chapter"] + (
                f"（{p['subchapter']}）" if p.get("subchapter") else ""
            )
            docs.append(
                {
                    "id": f"tangshi-{len(docs) + 1:03d}",
                    "title": f"{title}·{p['author'].strip()}",
                    "text": _lines(p["paragraphs"]),
                }
            )
    return docs


def guwen_docs(data) -> list[dict]:
    docs = []
    for juan in data["content"]:
        for e in juan["content"]:
            author = (e.get("author") or "").strip()
            docs.append(
                {
                    "id": f"guwen-{len(docs) + 1:03d}",
                    "title": e["chapter"].strip() + (f"·{author}" if author else ""),
                    "text": _lines(e["paragraphs"]),
                }
            )
    return docs


def write_jsonl(path: Path, docs: list[dict]) -> None:
    ids = [d["id"] for d in docs]
    assert all(a < b for a, b in itertools.pairwise(ids)), (
        f"ids not unique and sorted in {path.name}"
    )
    assert all(d["text"] for d in docs), f"empty document in {path.name}"
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(json.dumps(d, ensure_ascii=False) + "\n" for d in docs)


# ---------------------------------------------------------------------------- model


def train_spm(corpus: dict[str, list[dict]], out: Path, workdir: Path) -> None:
    import sentencepiece as spm

    train_txt = workdir / "spm_train.txt"
    with open(train_txt, "w", encoding="utf-8", newline="\n") as f:
        for name in sorted(corpus):
            for d in corpus[name]:
                for line in d["text"].split("\n"):
                    if line.strip():
                        f.write(line + "\n")
    # The trainer records `input` and `model_prefix` inside the .model file, so train with
    # fixed relative names from inside the work directory to keep the output byte-identical.
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        spm.SentencePieceTrainer.train(
            input=train_txt.name, model_prefix="spm", **SPM_OPTIONS
        )
    finally:
        os.chdir(cwd)
    shutil.copyfile(workdir / "spm.model", out / "spm.model")
    shutil.copyfile(workdir / "spm.vocab", out / "spm.vocab")


# ----------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out",
        default=str(Path(__file__).resolve().parent),
        help="output directory (default: the samples/ directory)",
    )
    ap.add_argument("--deb", help=f"path to {DEB_FILE} (default: apt-get download)")
    ap.add_argument("--tgz", help=f"path to {NPM_FILE} (default: npm pack)")
    ap.add_argument("--no-model", action="store_true", help="only write the corpus")
    args = ap.parse_args()

    out = Path(args.out)
    (out / "corpus").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="build_samples.") as tmp:
        work = Path(tmp)
        deb = fetch(
            args.deb,
            work,
            DEB_FILE,
            ["apt-get", "download", f"{DEB_NAME}={DEB_VERSION}"],
            DEB_SHA256,
        )
        tgz = fetch(
            args.tgz,
            work,
            NPM_FILE,
            ["npm", "pack", "--silent", f"{NPM_NAME}@{NPM_VERSION}"],
            NPM_SHA256,
        )

        novels = read_rdata(deb_member(deb, RDATA_DIR))
        zh = {}
        with tarfile.open(tgz, "r:gz") as tf:
            for key, member in NPM_MEMBERS.items():
                zh[key] = json.load(tf.extractfile(member))

        corpus = {
            "en_pride_and_prejudice": austen_chapters(
                novels["prideprejudice"], "pride-and-prejudice"
            ),
            "en_persuasion": austen_chapters(novels["persuasion"], "persuasion"),
            "zh_shijing": shijing_docs(zh["shijing"]),
            "zh_sishu": sishu_docs(
                zh["lunyu"], zh["daxue"], zh["zhongyong"], zh["mengzi"]
            ),
            "zh_tangshi300": tangshi_docs(zh["tangshi"]),
            "zh_guwenguanzhi": guwen_docs(zh["guwen"]),
        }
        for old in (out / "corpus").glob("*.jsonl"):
            if old.stem not in corpus:
                old.unlink()
        for name, docs in sorted(corpus.items()):
            write_jsonl(out / "corpus" / f"{name}.jsonl", docs)
            print(f"{name}.jsonl: {len(docs)} documents", file=sys.stderr)
        all_ids = [d["id"] for docs in corpus.values() for d in docs]
        assert len(set(all_ids)) == len(all_ids), "ids must be unique across files"

        if not args.no_model:
            train_spm(corpus, out, work)
            import sentencepiece as spm

            sp = spm.SentencePieceProcessor(model_file=str(out / "spm.model"))
            total, lossy = 0, 0
            for docs in corpus.values():
                for d in docs:
                    ids = sp.encode(d["text"])
                    total += len(ids)
                    lossy += sp.decode(ids) != d["text"]
            print(
                f"spm.model: vocab={sp.get_piece_size()} unk={sp.unk_id()} bos={sp.bos_id()} "
                f"eos={sp.eos_id()} pad={sp.pad_id()}; corpus tokens={total}; "
                f"docs not round-tripping={lossy}",
                file=sys.stderr,
            )
            if lossy:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
