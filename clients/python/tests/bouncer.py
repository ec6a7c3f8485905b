"""A real PgBouncer in front of the test instance (ADVLOCK_PY_DSN), in transaction or session
pooling mode, run as the postgres OS user (as pg_test/clients does), stopped at the end."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit

import psycopg

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def pgbouncer(dsn: str, pool_mode: str, pool_size: int = 2) -> Iterator[str]:
    """Yields the DSN of `dsn`'s database through a PgBouncer in `pool_mode`. Session mode keeps
    PgBouncer's default server_reset_query (DISCARD ALL), as a deployment would."""
    target = urlsplit(dsn)
    dbname = target.path.lstrip("/")
    port = _free_port()
    postgres = pwd.getpwnam("postgres")
    directory = tempfile.mkdtemp(prefix=f"advlock-pgbouncer-{pool_mode}.")
    os.chmod(directory, 0o755)
    userlist = os.path.join(directory, "userlist.txt")
    ini = os.path.join(directory, "pgbouncer.ini")
    with open(userlist, "w") as f:
        f.write('"postgres" ""\n')
    with open(ini, "w") as f:
        f.write(
            f"[databases]\n{dbname} = host={target.hostname} port={target.port} dbname={dbname}\n\n"
            "[pgbouncer]\nlisten_addr = 127.0.0.1\n"
            f"listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {userlist}\n"
            f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\nmin_pool_size = 0\nreserve_pool_size = 0\n"
            "max_client_conn = 100\nignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {directory}/pgbouncer.log\npidfile = {directory}/pgbouncer.pid\n"
        )
    for path in (directory, userlist, ini):
        os.chown(path, postgres.pw_uid, postgres.pw_gid)
    cmd = [PGBOUNCER, ini]
    if os.geteuid() != postgres.pw_uid:
        cmd = ["sudo", "-n", "-u", "postgres", "--", *cmd]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    through = urlunsplit((target.scheme, f"{target.username or 'postgres'}@127.0.0.1:{port}", target.path, "", ""))
    try:
        deadline = time.monotonic() + 15
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {proc.returncode}: {_log(directory)}")
            try:
                with psycopg.connect(through, autocommit=True) as c:
                    c.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"pgbouncer did not start: {_log(directory)}") from None
                time.sleep(0.1)
        yield through
    finally:
        proc.terminate()  # sudo relays SIGTERM to pgbouncer
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        shutil.rmtree(directory, ignore_errors=True)


def _log(directory: str) -> str:
    try:
        with open(os.path.join(directory, "pgbouncer.log")) as f:
            return f.read()[-3000:]
    except OSError as e:
        return f"(no log: {e})"
