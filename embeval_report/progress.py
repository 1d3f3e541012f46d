"""Progress bars for long steps (tqdm; quiet when EMBEVAL_PROGRESS=0 or output is not a terminal)."""
from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm


def enabled() -> bool:
    """Progress bars show on an interactive stderr unless ``EMBEVAL_PROGRESS=0``; ``=1`` forces them."""
    flag = os.environ.get("EMBEVAL_PROGRESS")
    if flag is not None:
        return flag not in ("0", "false", "no")
    return sys.stderr.isatty()


def progress(iterable, *, desc: str, total: int | None = None, **kw):
    """Wrap ``iterable`` in a progress bar when bars are enabled."""
    return tqdm(iterable, desc=desc, total=total, disable=not enabled(), leave=False, **kw)
