"""prometheus-client's multiprocess mode: check it is on before merging a folder's values."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import values


def check_multiprocess(folder: Path) -> None:
    """prometheus-client picked its value class at import time; make sure it matches `folder`."""
    if not getattr(values.ValueClass, "_multiprocess", False):
        raise RuntimeError(
            "metrics multiprocess folder given, but PROMETHEUS_MULTIPROC_DIR was not set in the "
            "environment before prometheus_client was imported; set it before starting workers"
        )
    if not Path(folder).is_dir():
        raise RuntimeError(f"metrics multiprocess folder {folder} does not exist")
