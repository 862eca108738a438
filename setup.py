"""token-windows: raw corpora → document-bounded token windows in seeded Parquet shards.

Also the ``--setup_file`` that Beam workers (Dataflow, Flink SDK harness) install, as in
Beam's ``examples/complete/juliaset``: the three packages and their requirements. Apache Beam
itself is not among them: the workers' SDK image brings it, and a trainer's environment never
needs it (the reader does not import it). Install what the place needs:

* ``pip install -e '.[job]'``: the job (``python -m pipeline``, ``token-windows``), with Beam;
* ``pip install -e '.[reader]'``: the reader and torch, without Beam;
* ``pip install -e '.[hf-train]'``: the reader with transformers' Trainer (``reader.hf``).
"""

import setuptools

VERSION = "0.1.0"
BEAM = "apache-beam>=2.77,<3"

# What transforms/ and reader/ import (and the job's workers, whose image has Beam already).
REQUIRES = [
    "numpy>=1.26",
    "orjson>=3.9",
    "pyarrow>=15",
    "sentencepiece>=0.2.0,<0.3",
    "zstandard>=0.21",
]

# The dedup pass's hashing in C (transforms/dedup/kernel.py), built where a compiler is found:
# without one the install goes on and the job hashes with NumPy (same keys, slower). -O3 lets
# gcc vectorize the MinHash loop; the AVX2 clone is chosen at load time, so a wheel stays
# portable.
KERNEL = setuptools.Extension(
    "transforms.dedup._kernel", ["transforms/dedup/_kernel.c"],
    extra_compile_args=["-O3"], optional=True)

setuptools.setup(
    name="token-windows",
    version=VERSION,
    description="Turn text corpora into training-ready token windows with Apache Beam.",
    long_description=__doc__,
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=setuptools.find_packages(
        include=["transforms", "transforms.*", "pipeline", "pipeline.*", "reader", "reader.*"]),
    ext_modules=[KERNEL],
    install_requires=REQUIRES,
    extras_require={
        # The job's launcher: python -m pipeline / token-windows (Beam workers have it).
        "job": [BEAM],
        # torch is a range the CPU wheel 2.13.0 satisfies; install that wheel first.
        "reader": ["torch>=2.1,<3"],
        # reader.hf.WindowTrainer (transformers.Trainer needs accelerate).
        "hf-train": ["torch>=2.1,<3", "transformers>=5,<6", "accelerate>=1.2"],
        # --tokenizer path/to/tokenizer.json (Hugging Face tokenizers). The reader needs no
        # transformers: a trainer that feeds an HF model brings its own (README, 5.x).
        "hf": ["tokenizers>=0.19", "tiktoken>=0.7"],  # tiktoken: docs/tokenizers.md#engines
        # python -m reader.inspect OUT --plot FILE.png
        "plot": ["matplotlib>=3.7"],
        "gcp": ["apache-beam[gcp]>=2.77,<3"],
        "aws": ["apache-beam[aws]>=2.77,<3"],  # s3:// paths
        "dask": ["apache-beam[dask]>=2.77,<3"],  # --runner DaskRunner (dask, distributed)
        "test": [
            "torch>=2.1,<3",
            "pytest>=8",
            "hypothesis>=6.100",
            "ruff>=0.5",
            "duckdb>=1.0",
            "pandas>=2",
            "polars>=1.0",
            "tokenizers>=0.19",
            "tiktoken>=0.7",
            "transformers>=5,<6",  # tests/reader/test_hf.py, tests/reader/test_hf_models.py
            "accelerate>=1.2",  # transformers.Trainer
            "datasets>=2.19",  # docs/training.md, the Parquet reader recipes
            "lightning>=2.2",  # docs/training.md's LightningDataModule
            "torchdata>=0.10",  # docs/training.md's StatefulDataLoader
            "matplotlib>=3.7",
            "moto[server]>=5",  # an S3 server on loopback (reader and job on s3://)
            # A Dask cluster and S3 for the job (tests/job/test_runners.py,
            # tests/job/test_stores.py).
            "apache-beam[dask,aws]>=2.77,<3",
            "dask[distributed]>=2024.1",
            "gcp-storage-emulator>=2024.8",  # a GCS server on loopback
            "psutil>=5.9",  # what the Dask cluster's processes listen on
        ],
        # megatron-core only for bench_reader's IndexedDataset baseline; install it
        # `pip install --no-deps megatron-core` (its own requirements are torch, numpy, packaging).
        "bench": ["datasets>=2.19", "psutil>=5.9", "megatron-core>=0.16",
                  "datatrove>=0.10", "spacy>=3.7"],  # bench_dedup's baseline (its tokenizer)
    },
    entry_points={"console_scripts": [
        "token-windows=pipeline.__main__:main",  # says what to install where Beam is missing
        # Never imports Beam: works in a trainer's environment.
        "token-windows-inspect=reader.inspect:main",
    ]},
)
