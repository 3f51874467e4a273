"""The service's own log lines (loggers under ``seer``) in every deployment's replica.

Ray Serve configures its ``ray.serve`` logger only; without a handler of their own the service's
INFO lines (a job cancelled by a caller that went away, a policy switch, a replica's state) would
be dropped. ``configure()`` sends them, INFO and above, to the replica's stderr, which Ray keeps
in the worker's log file under ``/tmp/ray/session_latest/logs`` (and prints on the driver when
``log_to_driver``). Idempotent.
"""

from __future__ import annotations

import logging

FORMAT = "%(levelname)s %(asctime)s %(name)s -- %(message)s"


def configure(level: int = logging.INFO) -> None:
    logger = logging.getLogger("seer")
    if any(getattr(h, "_seer", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    handler._seer = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)
