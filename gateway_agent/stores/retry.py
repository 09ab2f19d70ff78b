"""Retry policy shared by the cloud backends: tenacity with jittered exponential backoff.

Only :class:`TransientStoreError` is retried (backends translate throttling, 5xx, timeouts and
dropped connections into it); everything else surfaces at once. The SDKs' own retry loops are
turned off in each backend so attempts do not multiply.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from gateway_agent.stores.errors import TransientStoreError

T = TypeVar("T")

DEFAULT_MAX_ATTEMPTS = 6
DEFAULT_MAX_DELAY_S = 120.0


def retrying(
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    max_delay: float = DEFAULT_MAX_DELAY_S,
    backoff_s: float = 0.2,
) -> Retrying:
    """A tenacity controller: up to ``max_attempts`` tries within ``max_delay`` seconds."""
    return Retrying(
        retry=retry_if_exception_type(TransientStoreError),
        wait=wait_random_exponential(multiplier=backoff_s, max=10.0),
        stop=stop_after_attempt(max_attempts) | stop_after_delay(max_delay),
        reraise=True,
    )


def call_with_retry(
    policy: Retrying, translate: Callable[[Exception], Exception], fn: Callable[..., T], *args: Any
) -> T:
    """Run ``fn(*args)``; SDK exceptions become typed store errors, transient ones are retried.

    ``translate`` maps an SDK exception to a :class:`StoreError`; the original exception is
    dropped (``from None``) because SDK messages may echo signed URLs or connection details.
    """

    def attempt() -> T:
        try:
            return fn(*args)
        except Exception as exc:
            typed = translate(exc)
            if typed is exc:
                raise
            raise typed from None

    return policy(attempt)
