"""`pipeline.launch.views`: JobOptions makes each view of the job's options once."""

from __future__ import annotations

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
)

from pipeline.launch.options import TokenWindowsOptions
from pipeline.launch.views import JobOptions

ARGV = ["--input", "a", "--tokenizer", "bytes", "--output", "o", "--window", "8",
        "--runner", "DirectRunner", "--direct_num_workers", "2"]


def test_one_view_per_class_with_the_values_of_a_fresh_one():
    options = JobOptions(ARGV)
    view = options.view_as(TokenWindowsOptions)
    assert options.view_as(TokenWindowsOptions) is view
    assert options.view_as(StandardOptions) is options.view_as(StandardOptions)
    assert options.view_as(StandardOptions) is not view
    plain = PipelineOptions(ARGV)
    assert view.get_all_options() == plain.view_as(TokenWindowsOptions).get_all_options()
    assert (view.window, view.inputs, options.view_as(DirectOptions).direct_num_workers) == (
        8, ["a"], 2)


def test_a_value_set_on_one_view_is_seen_by_every_view():
    options = JobOptions(ARGV)
    options.view_as(StandardOptions).runner = "FnApiRunner"
    assert options.view_as(StandardOptions).runner == "FnApiRunner"
    assert options.view_as(TokenWindowsOptions).get_all_options()["runner"] == "FnApiRunner"
    assert options.get_all_options()["runner"] == "FnApiRunner"


def test_a_copy_has_the_same_values_and_views_of_its_own():
    import copy

    options = JobOptions(ARGV)
    view = options.view_as(StandardOptions)
    twin = copy.deepcopy(options)  # as beam.Pipeline copies the options it is given
    assert type(twin) is JobOptions
    assert twin.get_all_options() == options.get_all_options()
    assert twin.view_as(StandardOptions) is not view
    assert twin.view_as(StandardOptions) is twin.view_as(StandardOptions)
    twin.view_as(StandardOptions).runner = "FnApiRunner"
    assert twin.view_as(TokenWindowsOptions).get_all_options()["runner"] == "FnApiRunner"
    assert view.runner == "DirectRunner"
