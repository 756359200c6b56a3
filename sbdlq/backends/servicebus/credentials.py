"""azure-identity credentials for both SDK clients: the async AMQP client and the sync admin client.

A user may hand in either kind; each client gets the kind it needs through a small bridge.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
from typing import Any


def is_async_credential(credential: Any) -> bool:
    """Whether a credential's get_token is a coroutine function (azure.identity.aio's are)."""
    return inspect.iscoroutinefunction(getattr(credential, "get_token", None))


def default_async_credential() -> Any:
    """azure-identity's async DefaultAzureCredential, on a transport that needs no aiohttp."""
    from azure.identity.aio import DefaultAzureCredential

    options: dict[str, Any] = {}
    if importlib.util.find_spec("aiohttp") is None:
        # azure-identity's async HTTP credentials default to aiohttp, which is not a
        # dependency: give them azure-core's requests-based async transport.
        from azure.core.pipeline.transport import AsyncioRequestsTransport

        options["transport"] = AsyncioRequestsTransport()
    return DefaultAzureCredential(**options)


def as_async_credential(credential: Any) -> Any:
    """The credential itself if it is async, else an async face on it."""
    return credential if is_async_credential(credential) else AsyncCredential(credential)


class AsyncCredential:
    """An async face on a sync TokenCredential, for the AMQP client."""

    def __init__(self, credential: Any) -> None:
        self._credential = credential

    async def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        """Fetch a token in a worker thread."""
        return await asyncio.to_thread(self._credential.get_token, *scopes, **kwargs)

    async def close(self) -> None:
        """Nothing to close: the wrapped credential belongs to the caller."""


class SyncCredential:
    """A sync face on an async credential, for the admin client's worker threads."""

    def __init__(self, credential: Any, loop: asyncio.AbstractEventLoop, timeout_s: float) -> None:
        self._credential = credential
        self._loop = loop
        self._timeout_s = timeout_s

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        """Run the async get_token on the backend's loop (never call from that loop's thread)."""
        future = asyncio.run_coroutine_threadsafe(self._credential.get_token(*scopes, **kwargs), self._loop)
        return future.result(timeout=self._timeout_s)
