"""Training curves and token plots (PNG), one line per run, coloured by method."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

CURVES = [("reward/mean", "training reward"), ("val/accuracy", "validation accuracy"),
          ("response/length_mean", "new tokens per response"), ("tokens/generated_cum", "generated tokens (cum.)")]


def save(fig, path: Path) -> Path:
    """The figure as a PNG at ``path``, closed (every plot of the tables stage)."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def training_curves(runs: list[tuple[dict[str, Any], list[dict[str, float]]]], path: Path) -> Path:
    """runs: (summary, metric history rows with a 'step' key)."""
    fig, axes = plt.subplots(1, len(CURVES), figsize=(4.2 * len(CURVES), 3.4))
    colors = {}
    for summary, hist in runs:
        m = summary["method"]
        color = colors.setdefault(m, f"C{len(colors)}")
        for ax, (key, title) in zip(axes, CURVES):
            pts = [(h["step"], h[key]) for h in hist if key in h]
            if pts:
                xs, ys = zip(*pts)
                ax.plot(xs, ys, color=color, alpha=0.85, label=f"{m} s{summary['seed']}")
            ax.set_title(title)
            ax.set_xlabel("update")
    # one legend entry per method, also for methods without a line in the first panel (SFT)
    from matplotlib.lines import Line2D
    axes[0].legend(handles=[Line2D([0], [0], color=c, label=m) for m, c in colors.items()], fontsize=7)
    return save(fig, path)


def accuracy_bars(df, path: Path) -> Path:
    """Mean accuracy per method with its 95 % interval over training seeds and problems
    (``lo95``/``hi95`` of ``analysis.tables.accuracy_table``), not the sampling-seed spread."""
    labels = (df["method"] if "eval_set" not in df else df["method"] + "@" + df["eval_set"]).tolist()
    err = [(df["mean@k"] - df["lo95"]).clip(lower=0).tolist(), (df["hi95"] - df["mean@k"]).clip(lower=0).tolist()]
    # wide enough for one readable label per method; labels slanted when there are many
    fig, ax = plt.subplots(figsize=(max(5.0, 0.55 * len(df) + 1.5), 3.4))
    ax.bar(labels, df["mean@k"], yerr=err, color=[f"C{i % 10}" for i in range(len(df))], capsize=4)
    if len(df) > 5:
        ax.tick_params(axis="x", labelrotation=35)
        plt.setp(ax.get_xticklabels(), ha="right")
    ax.set_ylabel("held-out mean@k")
    ax.set_title("accuracy, 95% CI over training seeds and problems", fontsize=9)
    return save(fig, path)
