"""Which runner runs the job, what each needs, and the Beam quirks worked around.

Without ``--runner`` the job runs on Beam's FnApiRunner (`runner_for`). Any other runner gets
the same graph unchanged: ``--runner DataflowRunner`` (workers install the project from
``--setup_file ./setup.py``), ``--runner FlinkRunner`` or ``PortableRunner`` (SDK workers from
a worker pool or a container that has the project installed), ``--runner DaskRunner``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    TestOptions,
    WorkerOptions,
)

from pipeline.files import fs
from pipeline.launch.options import JobConfig, runner_name

__all__ = ["check_dataflow", "check_running_mode", "is_dataflow", "is_dry_run", "is_local",
           "local_mode", "prompt_bundle_ends", "runner_for", "settle_dry_run", "settle_setup"]


def is_dry_run(options: PipelineOptions) -> bool:
    """Whether ``--dry_run`` was given (in any of the spellings Beam lets through)."""
    return str(options.view_as(TestOptions).dry_run).lower() in ("true", "1", "yes")


def settle_dry_run(options: PipelineOptions) -> bool:
    """Whether this is a dry run, written back as a bool so that Beam agrees.

    ``--dry_run`` has no type in Beam: ``--dry_run=False`` arrives as the string 'False',
    which Beam's DataflowRunner would take for true (and then submit nothing).
    """
    dry = is_dry_run(options)
    options.view_as(TestOptions).dry_run = dry
    return dry


def settle_setup(options: PipelineOptions) -> None:
    """``--save_main_session`` off unless asked for: every DoFn lives in an installed module,
    and Beam would otherwise pickle ``__main__`` for the DataflowRunner (its default with
    cloudpickle), which no worker needs."""
    setup = options.view_as(SetupOptions)
    if setup.save_main_session is None:
        setup.save_main_session = False


def is_dataflow(options: PipelineOptions) -> bool:
    """Whether the job goes to Dataflow."""
    return runner_name(options) in ("dataflowrunner", "testdataflowrunner")


def is_local(options: PipelineOptions) -> bool:
    """Whether the job runs on the local runner (no ``--runner``, or the DirectRunner)."""
    return runner_name(options) in (None, "directrunner")


def local_mode(options: PipelineOptions) -> str:
    """The local runner's mode as the start line names it (``in_memory``,
    ``multi_processing x2``)."""
    direct = options.view_as(DirectOptions)
    mode = direct.direct_running_mode or "in_memory"
    if mode == "multi_processing":
        mode += f" x{direct.direct_num_workers or os.cpu_count() or 1}"
    return mode


def check_running_mode(options: PipelineOptions) -> None:
    """Refuse the local runner's mode that loses elements.

    Raises:
        ValueError: ``--direct_running_mode=multi_threading``.
    """
    if options.view_as(DirectOptions).direct_running_mode == "multi_threading":
        raise ValueError(
            "--direct_running_mode=multi_threading is refused: in Beam 2.77 it silently loses "
            "elements under load (1e6 elements through a GroupByKey lost 0.3-1.2 %); use "
            "in_memory or multi_processing"
        )


def check_dataflow(config: JobConfig, options: PipelineOptions) -> None:
    """What a Dataflow job needs that the launcher can tell without touching a file system.

    Raises:
        ValueError: a local path, or no way for the workers to install the project.
    """
    paths = [("--input", p) for p in config.inputs] + [("--output", config.output)]
    if config.tokenizer_path is not None:
        paths.append(("--tokenizer", config.tokenizer_path))
    for flag, path in paths:
        if fs.scheme(path) in (None, "file"):
            raise ValueError(
                f"{flag} {path} is a local path, which Dataflow workers cannot read or write; "
                "copy it to (or point it at) gs://BUCKET/..."
            )
    setup = options.view_as(SetupOptions)
    if not (
        setup.setup_file
        or setup.extra_packages
        or setup.requirements_file
        or options.view_as(WorkerOptions).sdk_container_image
    ):
        raise ValueError(
            "--runner DataflowRunner needs this project on its workers: pass --setup_file "
            "./setup.py (or --sdk_container_image with token-windows installed)"
        )


def runner_for(options: PipelineOptions) -> Any:
    """Beam's FnApiRunner unless --runner says otherwise (``--runner DaskRunner`` is Beam's
    ``apache_beam.runners.dask.dask_runner.DaskRunner``); None: the runner ``--runner`` names.

    A bare DirectRunner in Beam 2.77 first tries the Prism runner, which downloads a binary
    and ignores --direct_running_mode; the FnApiRunner is what DirectRunner falls back to
    and honours --direct_running_mode and --direct_num_workers. Outputs are identical either
    way (the tests compare bytes), but the default is the one we test.
    """
    if runner_name(options) == "daskrunner":
        # Beam knows the DaskRunner only by its full module path; --runner DaskRunner works.
        from apache_beam.runners.dask.dask_runner import DaskRunner

        return DaskRunner()
    if options.view_as(StandardOptions).runner is not None:
        return None
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    return fn_runner.FnApiRunner()


# How often Beam's state sampler wakes in the in-process runner (Beam's default: 200 ms).
SAMPLING_MS = 10


@contextlib.contextmanager
def prompt_bundle_ends(options: PipelineOptions) -> Iterator[None]:
    """While the job runs in this process (the local runner ``in_memory``), Beam's state
    sampler wakes every `SAMPLING_MS` instead of every 200 ms.

    The sampler is a thread per bundle that times the steps; a bundle ends only once it
    has joined that thread, which sleeps out its period first: up to 200 ms, 0.1 s on
    average, at the end of every bundle that ran a second or more. The job's encoding and
    writing steps are one such bundle each on this runner, and the cores sat idle through
    both waits. A shorter period costs a wake-up of a few microseconds every `SAMPLING_MS`
    and times the steps more finely. Other runners' workers are left as they are (their
    own processes, and on Dataflow the sampler feeds its monitoring).
    """
    if not (is_local(options) and local_mode(options) == "in_memory"):
        yield
        return
    from apache_beam.runners.worker import statesampler

    beams = statesampler.StateSampler
    if getattr(beams, "prompt", False):  # a job running alongside has put it in place:
        yield  # its end puts Beam's back, never this one's
        return

    class PromptSampler(beams):  # type: ignore[misc, valid-type]
        prompt = True

        def __init__(self, prefix: str, counter_factory: Any,
                     sampling_period_ms: int = SAMPLING_MS) -> None:
            super().__init__(prefix, counter_factory, sampling_period_ms)

    statesampler.StateSampler = PromptSampler  # type: ignore[misc]
    try:
        yield
    finally:
        statesampler.StateSampler = beams  # type: ignore[misc]
