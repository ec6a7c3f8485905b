"""The idempotency endpoint of the seeds, as a plain ASGI app on an asyncpg pool: a request
holds an xact lock on its Idempotency-Key while it works; a concurrent retry with the same key
gets 409 at once, a later one replays the stored response."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import psycopg

import advlock
from conftest import DSN, advisory_locks

Message = dict[str, Any]


def make_app(pool: asyncpg.Pool, working: asyncio.Event, finish: asyncio.Event) -> Any:
    async def app(
        scope: dict[str, Any], receive: Callable[[], Awaitable[Message]], send: Callable[[Message], Awaitable[None]]
    ) -> None:
        key = dict(scope["headers"])[b"idempotency-key"].decode()

        async def respond(status: int, body: str) -> None:
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": body.encode()})

        async with pool.acquire() as conn, conn.transaction():
            if not await advlock.try_lock(conn, "idempotency", key):
                return await respond(409, "a request with this key is in progress")
            stored = await conn.fetchval("SELECT response FROM idempotency WHERE key = $1", key)
            if stored is not None:
                return await respond(200, stored)
            working.set()
            await finish.wait()  # the work (payment, ...) happens here
            await conn.execute("INSERT INTO idempotency VALUES ($1, $2)", key, f"charged {key}")
            await respond(201, f"charged {key}")

    return app


async def call(app: Any, key: str) -> tuple[int, str]:
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/charge", "headers": [(b"idempotency-key", key.encode())]}
    await app(scope, receive, send)
    return sent[0]["status"], sent[1]["body"].decode()


def test_concurrent_retry_gets_409_and_a_later_one_the_stored_response(admin: psycopg.Connection[Any]) -> None:
    admin.execute("DROP TABLE IF EXISTS idempotency")
    admin.execute("CREATE TABLE idempotency (key text PRIMARY KEY, response text NOT NULL)")

    async def main() -> None:
        async with asyncpg.create_pool(DSN, min_size=3, max_size=3) as pool:
            working, finish = asyncio.Event(), asyncio.Event()
            app = make_app(pool, working, finish)
            first = asyncio.create_task(call(app, "req-1"))
            await asyncio.wait_for(working.wait(), 10)
            key = advlock.key("idempotency", "req-1")
            assert [(r[1], r[3]) for r in advisory_locks(admin)] == [(True, key)]
            assert await call(app, "req-1") == (409, "a request with this key is in progress")
            finish.set()
            assert await first == (201, "charged req-1")
            assert await call(app, "req-1") == (200, "charged req-1")
            assert await call(app, "req-2") == (201, "charged req-2")

    asyncio.run(main())
    assert admin.execute("SELECT count(*) FROM idempotency").fetchone() == (2,)
