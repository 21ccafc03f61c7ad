"""kvkey's counters on a prometheus_client registry.

An engine that already serves ``/metrics`` with prometheus_client (Debian
``python3-prometheus-client``) adds kvkey's counters with one line::

    import kvkey.prometheus
    prometheus_client.REGISTRY.register(kvkey.prometheus.Collector(metrics))

The collector reads ``metrics.render()`` (the exposition kvkey writes in C++)
at every scrape, so the names, help texts and labels are the same everywhere:
``kvkey_lookups_total``, ``kvkey_rejected_blocks_total{reason,field}``, ... (see
docs/operations.md, "What to monitor").
"""

from typing import Callable, Iterable, Iterator, List

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector as _CollectorBase

from . import Metrics

_parse: Callable[[str], Iterable[Metric]] = text_string_to_metric_families  # untyped in prometheus_client

__all__ = ["Collector", "families"]


def families(metrics: Metrics) -> List[Metric]:
    """The counters of ``metrics`` as prometheus_client metric families."""
    return list(_parse(metrics.render()))


class Collector(_CollectorBase):
    """A prometheus_client collector serving one :class:`kvkey.Metrics`."""

    def __init__(self, metrics: Metrics) -> None:
        if not isinstance(metrics, Metrics):
            raise TypeError("kvkey.prometheus.Collector: metrics must be a kvkey.Metrics, not %s"
                            % type(metrics).__name__)
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(families(self._metrics))

    def describe(self) -> Iterable[Metric]:
        # The same families: the registry learns the names (and refuses a second kvkey collector).
        return families(self._metrics)
