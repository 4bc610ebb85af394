"""Run a coroutine to completion from a test, whatever event loop the process holds: in a
worker thread with its own loop (Playwright's sync API, used by the browser tests, keeps an
event loop running in the main thread, where asyncio.run refuses to start)."""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor


def run(coro):
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
