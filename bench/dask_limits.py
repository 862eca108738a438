"""The smallest pipelines that show Beam 2.77's DaskRunner limits (README "Dask").

Runs three tiny pipelines on a ``distributed.LocalCluster`` of two worker processes on
127.0.0.1 and prints what each shows:

1. ``tags``: a consumer of the main output of a ``with_outputs`` ParDo also receives the
   tagged output, and what ``finish_bundle`` emits is dropped.
2. ``side input``: a side input read by two steps is computed again inside each reading task
   (the runner iterates the side input's own Dask graph there); its step's line prints once
   per computation.
3. ``partitions``: 8 elements from one ``Create``, a ``Reshuffle`` and a ``GroupByKey`` on 8
   keys: every task of the job runs on one worker, since ``Create`` makes one partition of up
   to 128 elements, ``Reshuffle`` is a no-op and ``GroupByKey`` keeps its input's partitions;
   then the same with ``--dask_npartitions 4``: the ``Create`` is cut into 4 partitions,
   which every later step keeps, and the tasks run on both workers. (A ``Create`` of one
   element stays one partition whatever the flag says: the job therefore starts from one
   element per input chunk on Dask, planned by the launcher.)
4. ``groups``: a ``GroupByKey`` keeps the number of partitions but places each key by a hash
   of it (``dask.bag.groupby``, task shuffle): 8 keys into 4 partitions do not land 2 by 2.
   So the job has no ``GroupByKey`` between its ``Create`` of chunks and their encoding: the
   chunks the launcher dealt into the ``Create``'s partitions stay where it put them.

    python bench/dask_limits.py
"""

from __future__ import annotations

import collections
import os

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms.window import GlobalWindows


class _Tagged(beam.DoFn):
    def process(self, x: int):
        yield x
        yield beam.pvalue.TaggedOutput("negated", -x)

    def finish_bundle(self):
        yield GlobalWindows.windowed_value("from finish_bundle")


def _side(x: int) -> int:
    print(f"  side input computed (pid {os.getpid()})", flush=True)
    return x


def _main(x: int, side: list[int]) -> int:
    return x + sum(side)


def _show(label: str, x: object) -> None:
    print(f"  {label}: {x!r}", flush=True)


def _run(p: beam.Pipeline) -> None:
    result = p.run()
    result.wait_until_finish()
    result.client.close()  # the runner's own client, which it leaves open


def main() -> None:
    from apache_beam.runners.dask.dask_runner import DaskRunner
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:
        options = PipelineOptions([f"--dask_client_address={cluster.scheduler_address}"])

        print("1. tags: the main output's consumer receives")
        p = beam.Pipeline(runner=DaskRunner(), options=options)
        out = p | beam.Create([1, 2]) | beam.ParDo(_Tagged()).with_outputs("negated", main="main")
        _ = out.main | "ShowMain" >> beam.Map(lambda x: _show("main", x))
        _run(p)

        print("2. side input read by two steps")
        p = beam.Pipeline(runner=DaskRunner(), options=options)
        side = p | "Side" >> beam.Create([10]) | "ComputeSide" >> beam.Map(_side)
        first = (p | "Main" >> beam.Create([1])
                 | "First" >> beam.Map(_main, beam.pvalue.AsList(side)))
        _ = (first | "Second" >> beam.Map(_main, beam.pvalue.AsList(side))
             | "ShowResult" >> beam.Map(lambda x: _show("result", x)))
        _run(p)

        print("3. partitions: tasks per worker")
        for flags in ([], ["--dask_npartitions=4"]):
            client.get_task_stream()  # start recording
            p = beam.Pipeline(runner=DaskRunner(), options=PipelineOptions(
                [f"--dask_client_address={cluster.scheduler_address}", *flags]))
            _ = (p | "Eight" >> beam.Create(list(range(8))) | "Spread" >> beam.Reshuffle()
                 | "Key" >> beam.Map(lambda x: (x, x)) | "Group" >> beam.GroupByKey()
                 | "Keys" >> beam.Map(lambda kv: kv[0]))
            _run(p)
            per_worker = collections.Counter(t["worker"] for t in client.get_task_stream())
            _show(f"tasks per worker {' '.join(flags) or '(no flag)'}", dict(per_worker))
        _show("workers", len(cluster.workers))

        print("4. groups: elements per partition after a GroupByKey of 8 keys, 4 partitions")
        import dask.bag as db

        # What Beam's DaskRunner does for a GroupByKey (transform_evaluator.GroupByKey).
        bag = db.from_sequence([(k, k) for k in range(8)], npartitions=4)
        grouped = bag.groupby(lambda kv: kv[0])
        _show("before", bag.map_partitions(lambda part: [len(list(part))]).compute())
        _show("after", grouped.map_partitions(lambda part: [len(list(part))]).compute())


if __name__ == "__main__":
    main()
