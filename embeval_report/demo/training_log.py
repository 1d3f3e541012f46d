"""Demo side data of the training-diagnostics chapter: the training log of the model behind the demo vectors.
The demo vectors are the ``baseline`` run's (the manifest's ``training_run``); the other two runs are
experiments beside it.

Three runs of the streaming platform's two-tower model, 60 epochs each, logged the way PyTorch
Lightning's ``CSVLogger`` writes them (a training row every 10 steps with ``loss``, ``lr`` and
``grad_norm``; a separate validation row per epoch with ``val_loss`` and ``val_recall_at_10``):

* ``baseline`` (lr 1e-3, warm-up then cosine decay, dropout 0.1) — converges cleanly; the
  validation loss keeps tracking the training loss;
* ``no-dropout`` (the same without dropout) — **overfits**: the training loss keeps falling while
  the validation loss bottoms out near epoch 18 and climbs after it;
* ``lr-3e-2`` (thirty times the learning rate) — **oscillates** with a period of about 8 logged
  checks from the start, then **diverges**: the loss climbs from epoch 34, the gradient norm explodes
  past 1,000 and the loss is NaN from epoch 41 until the run was killed.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

EPOCHS = 60
STEPS_PER_EPOCH = 100
LOG_EVERY = 10


def _lr(x: np.ndarray, peak: float) -> np.ndarray:
    warm = np.clip(x / 2.0, 0, 1)
    return peak * warm * 0.5 * (1 + np.cos(np.pi * np.clip(x, 0, EPOCHS) / EPOCHS))


def training_log(seed: int = 0) -> pd.DataFrame:
    """The demo log as a table (one row per logged training step or validation)."""
    rng = np.random.default_rng([seed, 76, 0])
    steps = np.arange(LOG_EVERY, EPOCHS * STEPS_PER_EPOCH + 1, LOG_EVERY)
    x = steps / STEPS_PER_EPOCH  # epochs, fractional
    i = np.arange(len(steps))
    frames = []
    for run in ("baseline", "no-dropout", "lr-3e-2"):
        if run == "baseline":
            loss = 0.30 + 1.7 * np.exp(-0.12 * x) + rng.normal(0, 0.02, len(x))
            val_fn = lambda e: 0.38 + 1.6 * np.exp(-0.11 * e)  # noqa: E731
            lr, grad = _lr(x, 1e-3), 0.3 + 2 * np.exp(-0.1 * x) * rng.lognormal(0, 0.2, len(x))
        elif run == "no-dropout":
            loss = 0.08 + 1.8 * np.exp(-0.15 * x) + rng.normal(0, 0.02, len(x))
            val_fn = lambda e: 0.47 + 1.5 * np.exp(-0.16 * e) + 0.012 * np.maximum(0, e - 18) ** 1.2  # noqa: E731
            lr, grad = _lr(x, 1e-3), 0.3 + 2 * np.exp(-0.1 * x) * rng.lognormal(0, 0.2, len(x))
        else:
            amp = 0.12 * (1 + x / 20)
            loss = 0.55 + 1.4 * np.exp(-0.2 * x) + amp * np.sin(2 * np.pi * i / 8) + rng.normal(0, 0.03, len(x))
            blow = np.maximum(0, x - 34)
            loss = loss + 0.08 * (np.exp(0.6 * blow) - 1)
            loss[x >= 41] = np.nan
            val_fn = lambda e: 0.62 + 1.3 * np.exp(-0.2 * e) + 0.08 * (np.exp(0.6 * np.maximum(0, e - 34)) - 1)  # noqa: E731
            lr = _lr(x, 3e-2)
            grad = (1.5 + 0.8 * np.abs(np.sin(2 * np.pi * i / 8))) * np.exp(0.95 * blow) * rng.lognormal(0, 0.2, len(x))
            grad[x >= 41] = np.nan
        stop = EPOCHS if run != "lr-3e-2" else 43
        keep = x <= stop
        train = pd.DataFrame({"run": run, "epoch": np.floor((steps - 1) / STEPS_PER_EPOCH).astype(int), "step": steps,
                              "loss": loss, "lr": lr, "grad_norm": grad})[keep]
        e = np.arange(1, stop + 1)
        v = val_fn(e) + rng.normal(0, 0.01, len(e))
        if run == "lr-3e-2":
            v[e >= 41] = np.nan
        recall = np.clip(0.62 - 0.35 * (v - v.min()) + rng.normal(0, 0.005, len(e)), 0, 1)
        val = pd.DataFrame({"run": run, "epoch": e - 1, "step": e * STEPS_PER_EPOCH, "val_loss": v,
                            "val_recall_at_10": recall})
        frames += [train, val]
    out = pd.concat(frames, ignore_index=True)
    out["_v"] = out["val_loss"].notna() | out["val_recall_at_10"].notna()
    out = out.assign(_r=out["run"].map({"baseline": 0, "no-dropout": 1, "lr-3e-2": 2})).sort_values(
        ["_r", "step", "_v"], kind="stable").drop(columns=["_r", "_v"])
    return out[["run", "epoch", "step", "loss", "lr", "grad_norm", "val_loss", "val_recall_at_10"]]


def demo_side_data(folder, seed: int = 0) -> dict:
    """Write ``training_log.csv`` into ``folder``; return the manifest entry to add (see the module docstring)."""
    folder = Path(folder)
    log = training_log(seed)
    train = log["val_loss"].isna() & log["val_recall_at_10"].isna()
    for c in ("loss", "lr", "grad_norm", "val_loss", "val_recall_at_10"):
        logged = train if c in ("loss", "lr", "grad_norm") else ~train  # a logged NaN is written "nan", a gap empty
        log[c] = [f"{v:.6g}" if ok else "" for v, ok in zip(log[c], logged)]
    log.to_csv(folder / "training_log.csv", index=False)
    return {"training_log": "training_log.csv", "training_run": "baseline"}
