"""The DSN a session lock connects with: a libpq URI or key=value string, or a SQLAlchemy URL,
turned into what the chosen driver accepts (checked before any connection is opened)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

# libpq's key = value syntax: a value is a run of non-blank characters or a single-quoted string
# in which \' and \\ stand for ' and \.
_PAIR = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']+)\s*")
_URI = re.compile(r"^(postgres(?:ql)?)(\+[A-Za-z0-9_]+)?://", re.I)


def parse_keywords(dsn: str) -> dict[str, str]:
    """libpq key=value pairs of dsn, or ValueError saying where it stops making sense."""
    pairs: dict[str, str] = {}
    pos = 0
    while pos < len(dsn):
        m = _PAIR.match(dsn, pos)
        if m is None:
            raise ValueError(f"dsn: not a libpq connection string (key=value pairs or a URI) at {dsn[pos:]!r}")
        value = m.group(2)
        if value.startswith("'"):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        pairs[m.group(1)] = value
        pos = m.end()
    return pairs


def keywords_to_uri(pairs: dict[str, str]) -> str:
    """The postgresql:// URI of libpq keywords (asyncpg takes URIs only)."""
    pairs = dict(pairs)
    user = pairs.pop("user", "")
    password = pairs.pop("password", "")
    host = pairs.pop("host", "")
    port = pairs.pop("port", "")
    dbname = pairs.pop("dbname", "")
    auth = quote(user, safe="") + (":" + quote(password, safe="") if password else "")
    hosts = host.split(",") if host else []
    ports = port.split(",") if port else []
    if any(h.startswith("/") for h in hosts):  # a Unix-domain socket directory goes in the query
        pairs["host"] = host
        if port:
            pairs["port"] = port
        hosts = []
    elif len(ports) > 1 and len(ports) != len(hosts):
        raise ValueError(f"dsn: {len(hosts)} hosts but {len(ports)} ports (give one port, or one per host)")
    # Several hosts (libpq's host=a,b port=p,q, tried in turn): asyncpg's URI lists them as
    # a:p,b:q; one port stands for every host, as in libpq.
    netloc = ",".join(
        h + (":" + (ports[i] if len(ports) > 1 else ports[0]) if ports else "") for i, h in enumerate(hosts)
    )
    if not hosts and port and not pairs.get("host"):
        netloc = ":" + port
    netloc = (auth + "@" if auth else "") + netloc
    query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs.items())
    return f"postgresql://{netloc}/{quote(dbname, safe='')}" + (f"?{query}" if query else "")


def normalize(dsn: object, driver: str) -> str:
    """The connection string for `driver` ('psycopg' or 'asyncpg'): a SQLAlchemy URL (or a
    `postgresql+driver://` string) loses its `+driver`; for asyncpg a key=value string
    becomes a URI. TypeError for what is not a DSN at all (a pool, an engine, a connection)."""
    url: Any = dsn
    if hasattr(url, "render_as_string") and hasattr(url, "drivername"):  # sqlalchemy.engine.URL
        backend = str(url.drivername).split("+")[0]
        if backend not in ("postgresql", "postgres"):
            raise ValueError(f"dsn: a session lock needs a PostgreSQL URL, got a {backend!r} URL")
        dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    if not isinstance(dsn, str):
        raise TypeError(
            "session_lock() takes a DSN (a connection string or a SQLAlchemy URL) and opens its own connection; got "
            f"{type(dsn).__module__}.{type(dsn).__qualname__}. A session lock on a pooled connection "
            "outlives your code (the pool hands it, lock included, to the next borrower): use "
            "session_lock(dsn, ...) (for an Engine: session_lock(engine.url, ...)), or advlock.lock() in a "
            "transaction on the pooled connection"
        )
    m = _URI.match(dsn)
    if m is not None:
        return "postgresql://" + dsn[m.end() :] if m.group(2) else dsn
    if driver == "asyncpg":
        return keywords_to_uri(parse_keywords(dsn))
    parse_keywords(dsn)  # the same check psycopg would make, before connecting
    return dsn
