"""The job's command-line options, turned at once into frozen, validated specs.

`TokenWindowsOptions` is a Beam ``PipelineOptions`` subclass, so the same flags work with
``python -m pipeline`` and when the job is built from Python. None of its flags is
``required=True``: Beam parses every options class it knows whenever it builds options, and
a required flag would break unrelated pipelines in the same process. `JobConfig.from_options`
checks them instead, before any work starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from pipeline.steps.encode import SHUFFLES
from pipeline.steps.read import TARGET_SHARD_INPUT_BYTES
from transforms.dedup.duplicates import DedupSpec
from transforms.dedup.removal import DECONTAMINATE_NGRAM, MAX_DECONTAMINATE_NGRAM
from transforms.params import (
    FORMATS,
    OFFSETS,
    SCORES,
    TAILS,
    UTF8_POLICIES,
    ReadSpec,
    WindowSpec,
    check_positive_int,
    default_of,
)
from transforms.plan.splits import TRAIN, SplitSpec
from transforms.tokenize.bpe_engine import ENGINES
from transforms.tokenize.tokenizers import BYTES, TokenizerSpec

__all__ = [
    "JobConfig",
    "TokenWindowsOptions",
    "default_encode_threads",
    "default_shuffle",
    "runner_name",
]

DEFAULT_WINDOW = 512


class TokenWindowsOptions(PipelineOptions):
    """Our flags; Beam's own (``--runner``, ``--direct_num_workers`` …) pass through."""

    @classmethod
    def _add_argparse_args(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("input")
        g.add_argument(
            "--input",
            dest="inputs",
            action="append",
            type=str,
            default=None,
            metavar="PATTERN",
            help="Input files: a path or glob on any Beam file system (local, gs://, s3://). "
            "Repeat for several patterns. Required.",
        )
        g.add_argument(
            "--format",
            dest="input_format",
            type=str,
            default=None,
            choices=FORMATS,
            help="Input format: text (one document per file), lines (one per line), jsonl, "
            "parquet. Default: from each file's extension (.txt .jsonl .parquet; .gz .bz2 "
            ".zst compression is always taken from the extension).",
        )
        g.add_argument(
            "--text-field",
            dest="text_field",
            type=str,
            default=default_of(ReadSpec, "text_field"),
            help="JSON key or Parquet column with the text. Default: %(default)s.",
        )
        g.add_argument(
            "--id-field",
            dest="id_field",
            type=str,
            default=None,
            help="JSON key or Parquet column with a document id. Default: none; the id is "
            "then FILE:LINE (JSONL, lines; 1-based), FILE:ROW (Parquet; 0-based) or FILE, with "
            "FILE relative to its pattern's directory.",
        )
        g.add_argument(
            "--keep-empty",
            dest="keep_empty",
            action="store_true",
            default=default_of(ReadSpec, "keep_empty"),
            help="Keep empty documents (each has one pair, BOS -> EOS). Default: skip and "
            "count them.",
        )
        g.add_argument(
            "--invalid-utf8",
            dest="invalid_utf8",
            type=str,
            default=default_of(ReadSpec, "invalid_utf8"),
            choices=UTF8_POLICIES,
            help="Undecodable bytes: replace them with U+FFFD and count the document "
            "(default), or reject the record.",
        )
        g.add_argument(
            "--max-doc-bytes",
            dest="max_doc_bytes",
            type=int,
            default=default_of(ReadSpec, "max_doc_bytes"),
            help="Reject (and count) documents with more UTF-8 bytes than this. Default: "
            "%(default)s (64 MiB).",
        )
        g = parser.add_argument_group("tokens and windows")
        g.add_argument(
            "--tokenizer",
            dest="tokenizer",
            type=str,
            default=None,
            help="'bytes' (UTF-8 bytes, BOS 256, EOS 257), the path of a SentencePiece "
            ".model, or of a Hugging Face tokenizer.json (needs the 'hf' extra), on any Beam "
            "file system. Required.",
        )
        for name, example in (("bos", "<s>"), ("eos", "</s>")):
            g.add_argument(
                f"--{name}-token",
                dest=f"{name}_token",
                type=str,
                default=None,
                metavar="TOKEN",
                help=f"With a tokenizer.json: the {name.upper()} token string (e.g. "
                f"'{example}'; one token may be both BOS and EOS). Default: the {name}_token "
                "of the tokenizer_config.json beside it.",
            )
        g.add_argument(
            "--tokenizer-engine",
            dest="tokenizer_engine",
            type=str,
            default="auto",
            choices=ENGINES,
            help="With a tokenizer.json: the library that encodes it. auto: tiktoken when the "
            "file converts to it exactly (byte-level BPE) and agrees on a probe text, else "
            "tokenizers; tiktoken: refuse a file that does not convert. The ids are "
            "tokenizers' either way. Default: %(default)s.",
        )
        g.add_argument(
            "--encode-threads",
            dest="encode_threads",
            type=int,
            default=None,
            help="SentencePiece threads per worker process. Default: the cores for the local "
            "runner (divided among multi_processing workers), 1 on runners that start an SDK "
            "process per core (Dataflow, Flink, portable). The ids do not depend on it.",
        )
        g.add_argument(
            "--window",
            dest="window",
            type=int,
            default=DEFAULT_WINDOW,
            help="W: the most (input, target) pairs in a window. Default: %(default)s.",
        )
        g.add_argument(
            "--stride",
            dest="stride",
            type=int,
            default=None,
            help="S: distance between window origins. Default: the window (no overlap).",
        )
        g.add_argument(
            "--tail",
            dest="tail",
            type=str,
            default=default_of(WindowSpec, "tail"),
            choices=TAILS,
            help="When fewer than W pairs remain: keep them as a short window, drop them, or "
            "trace_back (one last full window ending at EOS). Default: %(default)s.",
        )
        g.add_argument(
            "--min-tail",
            dest="min_tail",
            type=int,
            default=default_of(WindowSpec, "min_tail"),
            help="With --tail keep, the shortest tail kept. Default: %(default)s.",
        )
        g.add_argument(
            "--score",
            dest="score",
            type=str,
            default=default_of(WindowSpec, "score"),
            choices=SCORES,
            help="all: every target of every window is scored; new: only targets no earlier "
            "window of the document scored (each target once). Default: %(default)s.",
        )
        g.add_argument(
            "--offset",
            dest="offset",
            type=str,
            default=default_of(WindowSpec, "offset"),
            choices=OFFSETS,
            help="zero: windows start at BOS; random: a seeded first origin per document in "
            "[0, min(S, P-W+1)). Default: %(default)s.",
        )
        g.add_argument(
            "--seed",
            dest="seed",
            type=int,
            default=default_of(WindowSpec, "seed"),
            help="Seeds the document shuffle and random offsets. Default: %(default)s.",
        )
        g = parser.add_argument_group("splits and samples")
        g.add_argument(
            "--split",
            dest="split",
            type=str,
            default=None,
            metavar="NAME=FRACTION[,NAME=FRACTION...]",
            help=f"Write each document to one split, chosen by a seeded hash of its doc_id "
            f"(never of the windows), e.g. val=0.01,test=0.01; the rest is {TRAIN}. Each split "
            "is a dataset of its own in OUTPUT/NAME/. Default: one dataset in OUTPUT.",
        )
        g.add_argument(
            "--split-seed",
            dest="split_seed",
            type=int,
            default=None,
            help="Seeds the split (independent of --seed, so another shuffle keeps the same "
            "validation set). Default: 0.",
        )
        g.add_argument(
            "--sample",
            dest="sample",
            type=float,
            default=None,
            metavar="FRACTION",
            help="Keep this share (0 to 1] of the documents, chosen by a seeded hash of the "
            "doc_id: --sample 0.1 is a subset of --sample 0.2, whatever the window "
            "parameters. Default: every document.",
        )
        g.add_argument(
            "--sample-seed",
            dest="sample_seed",
            type=int,
            default=None,
            help="Seeds the sample (independent of --seed and --split-seed). Default: 0.",
        )
        _add_removal_args(parser)
        g = parser.add_argument_group("output")
        g.add_argument(
            "--output",
            dest="output",
            type=str,
            default=None,
            help="Output directory on any Beam file system. Required.",
        )
        g.add_argument(
            "--num-shards",
            dest="num_shards",
            type=int,
            default=None,
            help="Number of Parquet shards. Default: one per "
            f"{TARGET_SHARD_INPUT_BYTES >> 20} MiB of input files (their sizes as stored), at "
            "least one.",
        )
        g.add_argument(
            "--shuffle",
            dest="shuffle",
            type=str,
            default=None,
            choices=SHUFFLES,
            help="How documents reach the shard writers: through the runner's shuffle, or "
            "spilled to files under OUTPUT/.tmp with references through the shuffle (memory "
            "stays flat on the local runner, whose shuffle is in memory). Default: files on "
            "the local runner, runner elsewhere. The output does not depend on it.",
        )
        g.add_argument(
            "--overwrite",
            dest="overwrite",
            action="store_true",
            default=False,
            help="Replace a dataset already in --output: delete the files its manifest lists "
            "(and take over the claim a killed job left). Any other file there is refused. "
            "Default: refuse a non-empty output directory.",
        )
        g.add_argument(
            "--max-skipped-share",
            dest="max_skipped_share",
            type=float,
            default=1.0,
            help="Fail the job if more than this share of the records are skipped (0 to 1). A "
            "job in which every record is skipped always fails. Default: %(default)s (only "
            "that).",
        )
        g.add_argument(
            "--traceback",
            dest="traceback",
            action="store_true",
            default=False,
            help="On an error, print the whole traceback instead of one line (also: "
            "TOKEN_WINDOWS_TRACEBACK=1).",
        )


DEDUP_MODES = ("off", "exact", "near")


def _add_removal_args(parser: argparse.ArgumentParser) -> None:
    """--dedup and --decontaminate (docs/dedup.md)."""
    g = parser.add_argument_group("dedup and decontamination")
    g.add_argument(
        "--dedup",
        dest="dedup",
        type=str,
        default=None,
        choices=DEDUP_MODES,
        help="Remove copies before tokenizing: exact (equal normalized text) or near (MinHash "
        "over word n-grams with LSH bands, exact copies included); each cluster keeps its "
        "smallest doc_id, the others go to OUTPUT/_rejects/. Default: off.",
    )
    for name, what in (("ngram", "n of the word n-grams hashed"),
                       ("bands", "LSH bands"), ("rows", "rows (hashes) per band")):
        g.add_argument(
            f"--dedup-{name}",
            dest=f"dedup_{name}",
            type=int,
            default=None,
            help=f"With --dedup near: the {what}. Default: {default_of(DedupSpec, name)}.",
        )
    g.add_argument(
        "--decontaminate",
        dest="decontaminate",
        action="extend",
        nargs="+",
        type=str,
        default=None,
        metavar="PATH",
        help="Evaluation texts (files or globs, read like inputs: JSONL or Parquet by the "
        "text field, .txt line by line): remove every document sharing a word n-gram with "
        "one of them. Default: none.",
    )
    g.add_argument(
        "--decontaminate-ngram",
        dest="decontaminate_ngram",
        type=int,
        default=None,
        help=f"With --decontaminate: the n of the shared word n-grams (1 to "
        f"{MAX_DECONTAMINATE_NGRAM}). Default: {DECONTAMINATE_NGRAM}.",
    )


def _dedup(o: TokenWindowsOptions) -> tuple[DedupSpec, tuple[str, ...], int]:
    """--dedup*, --decontaminate* as (`DedupSpec`, evaluation patterns, their n-gram), errors
    naming the flag."""
    for name in ("ngram", "bands", "rows"):
        value = getattr(o, f"dedup_{name}")
        if value is not None and o.dedup != "near":
            raise ValueError(f"--dedup-{name} {value} does nothing without --dedup near: add "
                             f"--dedup near or drop --dedup-{name}")
    if o.decontaminate_ngram is not None and not o.decontaminate:
        raise ValueError(f"--decontaminate-ngram {o.decontaminate_ngram} does nothing without "
                         "--decontaminate: add --decontaminate PATH or drop it")
    given = {name: getattr(o, f"dedup_{name}") for name in ("ngram", "bands", "rows")}
    try:
        dedup = DedupSpec(mode=o.dedup or "off",
                          **{k: v for k, v in given.items() if v is not None})
    except ValueError as e:
        text = str(e)
        for name in ("ngram", "bands", "rows"):
            text = text.replace(f"`{name}`", f"--dedup-{name}")
        raise ValueError(text) from None
    ngram = DECONTAMINATE_NGRAM if o.decontaminate_ngram is None else o.decontaminate_ngram
    if isinstance(ngram, bool) or not isinstance(ngram, int) or not (
            1 <= ngram <= MAX_DECONTAMINATE_NGRAM):
        raise ValueError(f"--decontaminate-ngram must be an integer from 1 to "
                         f"{MAX_DECONTAMINATE_NGRAM}, but got {ngram!r}")
    return dedup, tuple(o.decontaminate or ()), ngram


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobConfig:
    """Everything the job needs, validated.

    Raises (from `from_options`):
        ValueError: a flag is missing or invalid; the message names it and the fix.
    """

    inputs: tuple[str, ...]
    output: str
    tokenizer: str
    read: ReadSpec
    windows: WindowSpec
    num_shards: int | None = None
    overwrite: bool = False
    encode_threads: int = 1
    shuffle: str = "runner"
    max_skipped_share: float = 1.0
    bos_token: str | None = None
    eos_token: str | None = None
    tokenizer_engine: str = "auto"
    splits: SplitSpec = dataclasses.field(default_factory=SplitSpec)
    # --dedup (its parameters), --decontaminate (the patterns; the launcher matches them)
    dedup: DedupSpec = dataclasses.field(default_factory=lambda: DedupSpec(mode="off"))
    decontaminate: tuple[str, ...] = ()
    decontaminate_ngram: int = DECONTAMINATE_NGRAM

    @property
    def removes(self) -> bool:
        """Whether the job has a dedup pass (--dedup or --decontaminate)."""
        return self.dedup.mode != "off" or bool(self.decontaminate)

    @property
    def tokenizer_path(self) -> str | None:
        """The tokenizer file's path, or None for the bytes tokenizer."""
        return None if self.tokenizer == BYTES else self.tokenizer

    @property
    def tokenizer_spec(self) -> TokenizerSpec:
        """The tokenizer file, the BOS/EOS tokens and the engine named for it
        (`pipeline.steps.encode`)."""
        return TokenizerSpec(self.tokenizer_path, self.bos_token, self.eos_token,
                             self.tokenizer_engine)

    @classmethod
    def from_options(cls, options: PipelineOptions) -> JobConfig:
        o = options.view_as(TokenWindowsOptions)
        if not o.inputs:
            raise ValueError("--input is required: pass the corpus files, e.g. --input 'c/*.jsonl'")
        if not o.output:
            raise ValueError("--output is required: pass the directory for the shards")
        if not o.tokenizer:
            raise ValueError(
                "--tokenizer is required: pass 'bytes', the path of a SentencePiece .model or "
                "of a Hugging Face tokenizer.json"
            )
        share = o.max_skipped_share
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
            raise ValueError(f"`max_skipped_share` must be in [0, 1], but got {share!r}")
        for name in ("num_shards", "encode_threads"):
            value = getattr(o, name)
            if value is not None:
                check_positive_int(name, value)
        read = ReadSpec(
            format=o.input_format,
            text_field=o.text_field,
            id_field=o.id_field,
            keep_empty=o.keep_empty,
            invalid_utf8=o.invalid_utf8,
            max_doc_bytes=o.max_doc_bytes,
        )
        windows = WindowSpec(
            window=o.window,
            stride=o.window if o.stride is None else o.stride,
            tail=o.tail,
            min_tail=o.min_tail,
            score=o.score,
            offset=o.offset,
            seed=o.seed,
        )
        splits = _splits(o)
        dedup, decontaminate, decontaminate_ngram = _dedup(o)
        return cls(
            inputs=tuple(o.inputs),
            output=o.output.rstrip("/") or o.output,
            tokenizer=o.tokenizer,
            read=read,
            windows=windows,
            num_shards=o.num_shards,
            overwrite=o.overwrite,
            encode_threads=o.encode_threads or default_encode_threads(options),
            shuffle=o.shuffle or default_shuffle(options),
            max_skipped_share=float(share),
            bos_token=o.bos_token,
            eos_token=o.eos_token,
            tokenizer_engine=o.tokenizer_engine,
            splits=splits,
            dedup=dedup,
            decontaminate=decontaminate,
            decontaminate_ngram=decontaminate_ngram,
        )


def _splits(o: TokenWindowsOptions) -> SplitSpec:
    """--split, --split-seed, --sample, --sample-seed as a `SplitSpec`, errors naming the flag."""
    for seed, flag, needs in ((o.split_seed, "--split-seed", o.split),
                              (o.sample_seed, "--sample-seed", o.sample)):
        if seed is not None and needs is None:
            what = flag.rsplit("-", 1)[0]
            raise ValueError(f"{flag} {seed} does nothing without {what}: add {what} or drop "
                             f"{flag}")
    try:
        return SplitSpec(splits=SplitSpec.parse(o.split) if o.split is not None else (),
                         seed=o.split_seed or 0,
                         sample=1.0 if o.sample is None else o.sample,
                         sample_seed=o.sample_seed or 0)
    except ValueError as e:
        text = str(e)
        for field, flag in (("`split_seed`", "--split-seed"), ("`sample_seed`", "--sample-seed"),
                            ("`sample`", "--sample"), ("`split ", "--split `")):
            text = text.replace(field, flag)
        raise ValueError(text) from None


def _is_local(options: PipelineOptions) -> bool:
    return runner_name(options) in (None, "directrunner")


def default_shuffle(options: PipelineOptions) -> str:
    """``files`` on the local runner (its GroupByKey holds its whole input in memory), else
    ``runner``: Dataflow's and Flink's shuffles are on disk already, and a file shuffle there
    would cost a range read per part per chunk (see the README)."""
    return "files" if _is_local(options) else "runner"


def default_encode_threads(options: PipelineOptions) -> int:
    """SentencePiece threads per worker process when ``--encode-threads`` is not given.

    The local runner (no ``--runner``, or the DirectRunner) runs in this machine's processes:
    its cores, divided among ``multi_processing`` workers. Other runners start one SDK
    process per core of their workers, so each process encodes on one thread.
    """
    cores = os.cpu_count() or 1
    if not _is_local(options):
        return 1
    direct = options.view_as(DirectOptions)
    if direct.direct_running_mode == "multi_processing":
        return max(1, cores // (direct.direct_num_workers or cores))
    return cores


def runner_name(options: PipelineOptions) -> str | None:
    """``--runner`` as Beam resolves it, lower case with the 'runner' suffix, or None."""
    runner = options.view_as(StandardOptions).runner
    if runner is None:
        return None
    name = (runner if isinstance(runner, str) else type(runner).__name__).rsplit(".", 1)[-1]
    name = name.lower()
    return name if name.endswith("runner") else name + "runner"
