"""Demo side data of the monitoring chapter: a history of batches from the demo's monthly snapshots.

The deployed model's reference is the demo set (``vectors.npy``): a profile is built from the baseline
vectors of a seeded half of the entities (:func:`embeval_report.monitoring.build_profile`). Each month of
:func:`embeval_report.demo.drift.demo_snapshots` then delivers traffic from the *other* half (and the new
items), split at random into two batches, so every batch is independent of the rows the profile holds, as
new traffic is. The snapshots are in a retrained model's coordinates (an arbitrary rotation each month);
a deployed model embeds new traffic in its own coordinates, so each snapshot is first rotated back onto
the baseline with the drift chapter's stable-core Procrustes fit
(:func:`embeval_report.metrics.drift.stable_core_rotation`).

**What the chapter should find.** February and March carry natural variation only (users renew a tenth
of their viewing history; new items arrive): no alert. From April the planted genre drift (documentary
items and their fans pulled 30 %, then 70 %, toward drama) changes the distribution: the two-sample
signals (MMD, per-dimension KS, the domain classifier) and the mean shift alert, more strongly in May.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

#: the history file the demo writes, and the profile folder next to it
HISTORY_FILE, PROFILE_DIR = "monitor_history.jsonl", "monitor_profile"
#: permutations of the MMD test in the demo (the CLI default is 500)
DEMO_PERM = 200


def demo_side_data(folder, seed: int = 0) -> dict:
    """Score the demo's monthly traffic against a profile of the baseline; write ``monitor_history.jsonl``
    (and the profile folder ``monitor_profile/``) into ``folder``; return ``{"monitor_history": ...}``."""
    from ..metrics.drift import stable_core_rotation
    from ..io.monitor_history import append_history
    from ..monitoring.score import history_record
    from ..monitoring.profile import build_profile, save_profile
    from ..monitoring.score import score_batch
    from .drift import demo_snapshots
    from .world import streaming_embeddings

    folder = Path(folder)
    X, meta = streaming_embeddings(seed=seed)  # vectors.npy and ids.txt: written beside this (:mod:`.beside`)
    ids = meta["id"].to_numpy().astype(str)
    rng = np.random.default_rng([seed, 82, 7])
    in_profile = np.zeros(len(X), bool)
    in_profile[rng.permutation(len(X))[: len(X) // 2]] = True
    profile = build_profile(X[in_profile], name="StreamCo baseline (half of the entities)", seed=seed,
                            sample_size=1500, calibration=500, device="cpu")
    save_profile(profile, folder / PROFILE_DIR)
    row = {i: r for r, i in enumerate(ids)}
    held = set(ids[in_profile])
    path = folder / HISTORY_FILE
    path.unlink(missing_ok=True)
    for t, (name, stamp, table) in enumerate(demo_snapshots(seed)):
        snap_ids = table["id"].to_numpy().astype(str)
        V = table.drop(columns="id").to_numpy(np.float64)
        both = np.array([i in row for i in snap_ids])
        R = stable_core_rotation(X[[row[i] for i in snap_ids[both]]], V[both])
        V = (V @ R).astype(np.float32)
        traffic = np.flatnonzero([i not in held for i in snap_ids])
        traffic = traffic[np.random.default_rng([seed, 82, 8, t]).permutation(len(traffic))]
        for half, (part, day) in enumerate(zip(np.array_split(traffic, 2), ("01", "15"))):
            score = score_batch(profile, V[np.sort(part)], seed=seed + t * 2 + half, n_perm=DEMO_PERM,
                                label=f"{name} batch {half + 1}", device="cpu")
            append_history(path, history_record(score, batch=f"{name} ({'ab'[half]})", timestamp=f"{name}-{day}",
                                                file=f"snapshot_{name}.parquet"))
    return {"monitor_history": HISTORY_FILE}
