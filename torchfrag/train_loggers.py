"""The training CLI's scalar loggers (``logger=csv|tensorboard|wandb|none``): TorchRL's own
``CSVLogger``, ``TensorboardLogger`` and ``WandbLogger``, checked before a run starts.

``logger=wandb`` runs offline by default (``logger.mode=offline``: the run is written under
``<run dir>/wandb/`` and needs no account or network; ``wandb sync`` uploads it later);
``logger.mode=online`` logs to W&B's server, ``logger.project`` names the project.

Example:
    >>> from omegaconf import OmegaConf
    >>> check_logger(OmegaConf.create({"backend": "csv", "exp_name": "train"}))
    >>> check_logger(OmegaConf.create({"backend": "mlflow"}))
    Traceback (most recent call last):
    ...
    ValueError: logger.backend='mlflow' is not one of csv, tensorboard, wandb, none
"""
from __future__ import annotations

import importlib.util
import logging
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["BACKENDS", "WANDB_MODES", "check_logger", "make_logger"]

#: ``logger.backend`` values and the package each needs (``None``: nothing beyond torchrl).
BACKENDS = {"csv": None, "tensorboard": "tensorboard", "wandb": "wandb", "none": None}
#: ``logger.mode`` values of ``logger=wandb`` (``wandb.init(mode=...)``).
WANDB_MODES = ("offline", "online", "disabled")


def check_logger(cfg: Any) -> None:
    """Refuses an unknown backend, a missing package or a bad ``logger.mode``, in one line.

    Args:
        cfg: The ``logger`` node of the training config.

    Raises:
        ValueError: Naming the key, the value and what is allowed (or how to install).
    """
    backend = cfg.get("backend")
    if backend not in BACKENDS:
        raise ValueError(f"logger.backend={backend!r} is not one of {', '.join(BACKENDS)}")
    package = BACKENDS[backend]
    if package is not None and importlib.util.find_spec(package) is None:
        raise ValueError(f"logger={backend} needs the `{package}` package: pip install {package}"
                         + (" (offline runs need no account)" if backend == "wandb" else "")
                         + ", or use logger=csv")
    mode = cfg.get("mode", "offline")
    if backend == "wandb" and mode not in WANDB_MODES:
        raise ValueError(f"logger.mode={mode!r} is not one of {', '.join(WANDB_MODES)}")


def make_logger(cfg: Any, run_dir: str, config: Any = None) -> Any:
    """TorchRL's logger for ``cfg.backend`` writing into ``run_dir`` (``None`` for ``none``);
    its ``close()`` finishes the W&B run or closes the TensorBoard writer.

    Args:
        cfg: The ``logger`` node (checked by :func:`check_logger`).
        run_dir: The run's output folder.
        config: The whole training config, recorded as the W&B run's config.
    """
    check_logger(cfg)
    backend = cfg.backend
    if backend == "none":
        return None
    if backend == "tensorboard":
        from torchrl.record.loggers import TensorboardLogger

        return TensorboardLogger(cfg.exp_name, log_dir=run_dir)
    if backend == "wandb":
        from torchrl.record.loggers.wandb import WandbLogger

        mode = cfg.get("mode", "offline")
        # offline=True: TorchRL also sets WANDB_MODE for the process, so nothing dials out.
        tlog = WandbLogger(cfg.exp_name, offline=mode == "offline", save_dir=run_dir,
                           project=cfg.get("project") or "torchfrag", mode=mode,
                           log_env_packages=False)
        if config is not None:
            tlog.log_hparams(config)
        logger.info("logging to W&B (%s): %s", mode, run_dir)
        return tlog
    from torchrl.record.loggers import CSVLogger

    return CSVLogger(cfg.exp_name, log_dir=run_dir)
