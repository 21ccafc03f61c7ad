"""The soak's picture: hit rate and cumulative wrong loads over the run, legacy
against kvkey, with the adapter swap, weight update and dtype switch marked.
Every number drawn comes from the run (matplotlib, Agg backend)."""

from typing import Any, Dict, List

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import traffic as tr  # noqa: E402

LEGACY = "#c0392b"
KVKEY = "#1f77b4"


def _rolling_hit_rate(series: List[List[int]], window: int) -> List[float]:
    out = []
    used = blocks = 0
    for i, (u, b, _) in enumerate(series):
        used += u
        blocks += b
        if i >= window:
            used -= series[i - window][0]
            blocks -= series[i - window][1]
        out.append(100.0 * used / blocks if blocks else 0.0)
    return out


def draw(path: str, legacy: Any, ours: Any, metrics: Dict[str, Any], args: Any) -> None:
    n = len(legacy.series)
    x = list(range(1, n + 1))
    window = max(20, args.requests_per_phase // 100)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.2), sharex=True, dpi=90,
                                      gridspec_kw={"height_ratios": [1, 1]})
    top.plot(x, _rolling_hit_rate(legacy.series, window), color=LEGACY, lw=1.4,
             label="legacy keys (lmdeploy): its hits include the wrong loads")
    top.plot(x, _rolling_hit_rate(ours.series, window), color=KVKEY, lw=1.4, label="kvkey")
    top.set_ylabel("blocks reused, %% (last %d requests)" % window)
    top.set_ylim(0, 100)
    top.legend(loc="lower right", fontsize=9)
    bottom.plot(x, [s[2] for s in legacy.series], color=LEGACY, lw=1.8,
                label="legacy: %d wrong loads" % legacy.wrong)
    bottom.plot(x, [s[2] for s in ours.series], color=KVKEY, lw=1.8,
                label="kvkey: %d wrong loads, %d rejected, %d false hits"
                % (ours.wrong, metrics["rejections"], metrics["false_hits"]))
    bottom.set_ylabel("wrong loads (cumulative)")
    causes: Dict[str, int] = {}
    for p in legacy.phases:
        for cause, k in p.causes.items():
            causes[cause] = causes.get(cause, 0) + k
    text = "legacy wrong loads by what differed\nbetween writer and reader:\n" + "\n".join(
        "  %s: %d" % (cause, k) for cause, k in sorted(causes.items(), key=lambda kv: -kv[1]))
    bottom.text(0.99, 0.04, text, transform=bottom.transAxes, ha="right", va="bottom", fontsize=8.5,
                family="monospace", bbox={"facecolor": "white", "edgecolor": "0.7", "alpha": 0.9})
    bottom.set_xlabel("requests")
    bottom.legend(loc="upper left", fontsize=9)
    for p, phase in enumerate(tr.PHASES):
        if not phase.event:
            continue
        at = p * args.requests_per_phase + 1
        for ax in (top, bottom):
            ax.axvline(at, color="0.4", ls="--", lw=0.9)
        top.annotate(phase.event, (at, 100), xytext=(3, -12), textcoords="offset points", fontsize=9, color="0.25")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.set_xlim(1, n)
    faults = sum(p.faults for p in ours.phases)
    fig.suptitle("Same traffic, two key schemes: 2 tenants, TP=2, LoRA, %d requests, %d store faults (seed %d)"
                 % (n, faults, args.seed), fontsize=10.5)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
