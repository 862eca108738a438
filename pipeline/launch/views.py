"""The job's ``PipelineOptions``, whose views are made once (the job's fixed cost:
docs/tokenizers.md#fixed-cost)."""

from __future__ import annotations

from typing import Any

from apache_beam.options.pipeline_options import PipelineOptions

__all__ = ["JobOptions"]


class JobOptions(PipelineOptions):
    """``PipelineOptions`` that make each view once.

    Beam asks the job's options for a view (``options.view_as(TypeOptions)`` …) a few hundred
    times while it builds and runs the graph, and each view parses every flag again with a
    fresh argparse parser: about a third of the graph's construction time. A view holds
    nothing of its own (its values live in the dictionary that all views share), so one view
    per options class serves every caller, with the same values.
    """

    def __getstate__(self) -> dict[str, Any]:
        # Without the views: Beam deep-copies the options (beam.Pipeline), and each view,
        # being a PipelineOptions, would make a fresh view of its own while it is copied
        # (PipelineOptions.__getstate__ looks at GoogleCloudOptions): about 10 ms. The copy
        # makes its views again, as it needs them.
        state = dict(super().__getstate__())
        state.pop("_views", None)
        return state

    def view_as(self, cls: type[Any]) -> Any:
        views = self.__dict__.setdefault("_views", {})  # not an option: bypass __setattr__
        view = views.get(cls)
        if view is None:
            view = views[cls] = super().view_as(cls)
        return view
