"""Coroutines of the native module (internal): devbuf's `*_async` calls return
``run(start)``, a coroutine that starts the Rust future (on devbuf's tokio runtime) only
when awaited, so it can be made outside a running event loop (``asyncio.run(...)``)."""


async def run(start):
    return await start()
