"""The run's ``learning_curve.png``: training returns over frames and the final evaluation.

The legend sits below the axes, where it cannot hide the curve; a run in which no training
episode finished says so on the plot instead of drawing empty axes.

Example:
    >>> fig = learning_curve_figure([], [], "ppo on CartPole-v1 (seed 0)", frames=256)
    >>> [t.get_text() for t in fig.axes[0].texts]
    ['no training episode finished in 256 frames']
    >>> import matplotlib.pyplot as plt; plt.close(fig)
"""
from __future__ import annotations

from typing import Any

__all__ = ["learning_curve_figure", "save_learning_curve"]


def learning_curve_figure(curve: list[tuple[int, float]], evals: list[float], title: str,
                          frames: int | None = None) -> Any:
    """A matplotlib figure of the learning curve (the caller closes it).

    Args:
        curve: ``(frames, mean training episode return)`` per iteration that ended episodes.
        evals: Returns of the final evaluation episodes (a dashed line at their mean).
        title: The plot's title.
        frames: Frames the run trained for (named when no episode finished).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.4))
    if curve:
        xs, ys = zip(*curve)
        ax.plot(xs, ys, lw=1, label="training episode return (mean per iteration)")
    else:
        within = f" in {frames} frames" if frames is not None else ""
        ax.text(0.5, 0.5, f"no training episode finished{within}", transform=ax.transAxes,
                ha="center", va="center", color="0.3")
        if frames:
            ax.set_xlim(0, frames)
        if not evals:  # no return at all: a y scale would only suggest one
            ax.set_yticks([])
    if evals:
        ax.axhline(sum(evals) / len(evals), color="C3", ls="--",
                   label=f"final evaluation (mean of {len(evals)})")
    ax.set_xlabel("frames")
    ax.set_ylabel("episode return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if curve or evals:
        # Below the axes (under the x label): never over the curve.
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def save_learning_curve(curve: list[tuple[int, float]], evals: list[float], path: str, title: str,
                        frames: int | None = None) -> None:
    """Writes :func:`learning_curve_figure` as a PNG at ``path``."""
    import matplotlib.pyplot as plt

    fig = learning_curve_figure(curve, evals, title, frames=frames)
    try:
        fig.savefig(path, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
