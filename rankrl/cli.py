"""How entry points end on an error the user can fix: one line on stderr, exit status 2, no traceback.

A config or environment problem (a wrong type, a missing data file, a missing model, vLLM on a machine
without it) is not a bug, so a traceback would only hide the message. ``HYDRA_FULL_ERROR=1`` shows the
traceback anyway.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

from rankrl.data.errors import MalformedDataError, MissingDataError
from rankrl.errors import UserError


def user_errors() -> tuple[type[BaseException], ...]:
    from rankrl.rl.checkpoint import CheckpointError

    return (UserError, MissingDataError, MalformedDataError, CheckpointError)


def _root_cause(err: BaseException) -> BaseException:
    # hydra.utils.instantiate wraps what a constructor raised in an InstantiationException
    while err.__cause__ is not None and type(err).__name__ == "InstantiationException":
        err = err.__cause__
    return err


def one_line_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a Hydra task function so user errors end the process with one line and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as err:
            cause = _root_cause(err)
            if os.environ.get("HYDRA_FULL_ERROR") == "1" or not isinstance(cause, user_errors()):
                raise
            print(f"error: {cause}", file=sys.stderr)
            raise SystemExit(2) from None

    return wrapper
