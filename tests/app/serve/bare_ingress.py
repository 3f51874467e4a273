"""An ``Ingress`` without Serve or its ``__init__``, for unit tests of its methods (its Serve
wrapper's async ``__del__`` would warn when such an instance is collected: quieted here)."""

from __future__ import annotations

from typing import Any

from app.serve.ingress.deployment import Ingress


def bare_ingress() -> Any:
    base: Any = Ingress.func_or_class  # the class under Serve's decorator

    class Bare(base):  # type: ignore[misc, valid-type]
        def __del__(self) -> None:
            pass

    return Bare.__new__(Bare)
