"""The one PgBouncer launcher of advlock's test suites: it writes pgbouncer.ini and the userlist,
starts PgBouncer (Debian's pgbouncer, 1.18) as the postgres OS user on a free port, returns once
a query goes through it to the target database, and stops it. The pg_test suites and the Python
client's tests call it in-process (pgtestsupport.pgbouncer); the Ruby and Node clients' tests run
it as a subprocess (clients/ruby/test/bouncer.rb, clients/node/test/helpers.ts):

    python3 pg_test/pgbouncer_launcher.py run --target postgresql://postgres@127.0.0.1:5433/db \\
        --mode transaction --pool-size 2 [--port N] [--set NAME=VALUE]... [--dir D | --prefix P]

prints the URL of the target's database through PgBouncer once it serves a query there, keeps
PgBouncer running until its standard input closes (or SIGTERM, SIGINT), then stops it and exits
(0). Errors (with the end of PgBouncer's log) go to standard error, with exit status 1. A
foreground `run` rather than `start` and `stop`: PgBouncer (under sudo) stays the launcher's child
and the launcher its caller's, so each is waited for by its parent (an orphan would be left to
PID 1, which need not reap it), and a test process that dies closes the launcher's standard
input, so no PgBouncer outlives it.

A Python module rather than a shell script: the pytest suites, most of the callers, use it
in-process (no output to parse, failures as pytest failures with the log). Standard library
only: Ruby's and Node's suites run it with the system python3, which has no psycopg. Typed
(mypy --strict follows it from pgtestsupport with the Python client's tests).
"""
from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn
from urllib.parse import quote, unquote, urlsplit

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
USER = "postgres"
MODES = ("session", "transaction", "statement")


class LaunchError(Exception):
    """PgBouncer did not start or did not serve a query in time (the message has its log)."""


@dataclass(frozen=True)
class Target:
    """The database PgBouncer fronts: where the server listens, the database and the user."""
    host: str
    port: int
    dbname: str
    user: str = USER

    @classmethod
    def from_url(cls, url: str) -> Target:
        """postgresql://USER@HOST:PORT/DBNAME (user default postgres, port default 5432)."""
        parts = urlsplit(url)
        dbname = unquote(parts.path.lstrip("/"))
        if parts.scheme not in ("postgresql", "postgres") or not parts.hostname or not dbname:
            raise ValueError(f"not a postgresql://[user@]host[:port]/dbname URL: {url}")
        return cls(parts.hostname, parts.port or 5432, dbname, unquote(parts.username or USER))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(directory: str, target: Target, pool_mode: str, pool_size: int, port: int,
                 settings: Mapping[str, object] | None = None) -> str:
    """Writes pgbouncer.ini and userlist.txt into `directory`; returns the ini's path. The
    [pgbouncer] section: listening on 127.0.0.1:`port` only (no unix socket), trusting every
    client, `pool_mode` with a pool of `pool_size` server connections and no reserve, and the
    caller's `settings` on top (they override; an empty value writes `name =`). Every client is
    logged in to the server as target.user."""
    userlist = os.path.join(directory, "userlist.txt")
    ini = os.path.join(directory, "pgbouncer.ini")
    merged: dict[str, object] = {
        "listen_addr": "127.0.0.1", "listen_port": port, "unix_socket_dir": "", "auth_type": "trust",
        "auth_file": userlist, "pool_mode": pool_mode, "default_pool_size": pool_size,
        "reserve_pool_size": 0, "max_client_conn": 100,
        "logfile": os.path.join(directory, "pgbouncer.log"), "pidfile": os.path.join(directory, "pgbouncer.pid"),
    }
    merged.update(settings or {})
    with open(userlist, "w") as f:
        f.write(f'"{target.user}" ""\n')
    with open(ini, "w") as f:
        f.write(f"[databases]\n{target.dbname} = host={target.host} port={target.port} dbname={target.dbname}"
                f" user={target.user}\n\n[pgbouncer]\n")
        f.writelines(f"{name} = {value}".rstrip() + "\n" for name, value in merged.items())
    return ini


def psql() -> str:
    """The psql of the instance's tree (PGBIN, as pg_test/run.sh and the clients' run_tests.sh
    export it), else the one on PATH."""
    pgbin = os.environ.get("PGBIN")
    if pgbin and os.access(os.path.join(pgbin, "psql"), os.X_OK):
        return os.path.join(pgbin, "psql")
    return shutil.which("psql") or "psql"


def serves(target: Target, port: int) -> bool:
    """Whether `SELECT 1` on the target database through 127.0.0.1:`port` succeeds, with psql
    (the standard library speaks no PostgreSQL). The caller's PG* variables are left out (PGHOST,
    PGOPTIONS, ...: PgBouncer refuses startup options it does not know)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env.update(PGCONNECT_TIMEOUT="10", PGAPPNAME="advlock-test/bouncer-probe")
    cmd = [psql(), "-X", "-q", "-w", "-h", "127.0.0.1", "-p", str(port), "-U", target.user, "-d", target.dbname,
           "-c", "SELECT 1"]
    try:
        return subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=15).returncode == 0
    except subprocess.TimeoutExpired:
        return False


class Running:
    """A PgBouncer start() started, listening on 127.0.0.1:`port`; its ini, userlist, pid file,
    log and stdout.log are in `directory` (the caller's: stop() leaves it)."""

    def __init__(self, target: Target, port: int, directory: str, proc: subprocess.Popen[bytes]) -> None:
        self.target = target
        self.port = port
        self.directory = directory
        self.proc = proc

    @property
    def url(self) -> str:
        """A postgresql:// URL of the target's database through this PgBouncer."""
        return f"postgresql://{quote(self.target.user)}@127.0.0.1:{self.port}/{quote(self.target.dbname)}"

    def log(self) -> str:
        """The end of PgBouncer's log (for failure messages)."""
        try:
            with open(os.path.join(self.directory, "pgbouncer.log")) as f:
                return f.read()[-4000:]
        except OSError as e:
            return f"(no log: {e})"

    def stop(self) -> None:
        """Stops PgBouncer (SIGTERM: immediate shutdown; SIGKILL after 10 s) and waits for it."""
        if self.proc.poll() is None:
            self.proc.terminate()  # pgbouncer, or sudo, which relays SIGTERM to it
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        # Belt and braces: sudo killed before relaying leaves pgbouncer running, which wrote its
        # pid file as postgres.
        try:
            with open(os.path.join(self.directory, "pgbouncer.pid")) as f:
                pid = int(f.read().strip())
            with open(f"/proc/{pid}/comm") as f:
                still_running = f.read().strip() == "pgbouncer"
        except (OSError, ValueError):
            still_running = False
        if still_running:
            try:
                os.kill(pid, signal.SIGTERM)
            except PermissionError:
                subprocess.run(["sudo", "-n", "-u", USER, "--", "kill", str(pid)], check=False)


def start(target: Target, pool_mode: str, pool_size: int, directory: str, port: int | None = None,
          settings: Mapping[str, object] | None = None, timeout: float = 15.0) -> Running:
    """PgBouncer in `pool_mode` with a pool of `pool_size` server connections to `target`'s
    database, its files in `directory` (which must exist), listening on 127.0.0.1:`port`
    (default: a free port), with `settings` on top of write_config's. Runs as the postgres OS
    user (through sudo -n when this is another user, root too). Returns once it serves a query;
    raises LaunchError (PgBouncer stopped) if it exits or does not serve within `timeout` seconds."""
    if pool_mode not in MODES:
        raise ValueError(f"pool mode {pool_mode!r} is not one of {', '.join(MODES)}")
    if not os.path.exists(PGBOUNCER):
        raise LaunchError("pgbouncer is not installed (scripts/setup.sh installs it)")
    port = free_port() if port is None else port
    ini = write_config(directory, target, pool_mode, pool_size, port, settings)
    # pgbouncer refuses to run as root; as postgres it must read its files and write its log
    # and pid file into the directory.
    postgres = pwd.getpwnam(USER)
    if os.geteuid() == 0:
        for path in (directory, ini, os.path.join(directory, "userlist.txt")):
            os.chown(path, postgres.pw_uid, postgres.pw_gid)
    os.chmod(directory, 0o755)
    cmd = [PGBOUNCER, ini]
    if os.geteuid() != postgres.pw_uid:
        cmd = ["sudo", "-n", "-u", USER, "--", *cmd]
    with open(os.path.join(directory, "stdout.log"), "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    running = Running(target, port, directory, proc)
    try:
        deadline = time.monotonic() + timeout
        while not serves(target, port):
            if proc.poll() is not None:
                raise LaunchError(f"pgbouncer exited with {proc.returncode}:\n{running.log()}")
            if time.monotonic() > deadline:
                raise LaunchError(f"timed out after {timeout}s waiting for pgbouncer on port {port}:\n{running.log()}")
            time.sleep(0.1)
    except BaseException:
        running.stop()
        raise
    return running


class _Stop(Exception):
    pass


def _stop_signal(signum: int, frame: object) -> NoReturn:
    raise _Stop


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value.strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pgbouncer_launcher.py",
                                     description="Runs a PgBouncer in front of a database for a test suite.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="start PgBouncer, print its URL, stop it when stdin closes")
    run.add_argument("--target", required=True, help="postgresql://[user@]host[:port]/dbname behind PgBouncer")
    run.add_argument("--mode", required=True, choices=MODES, help="pool_mode")
    run.add_argument("--pool-size", required=True, type=int, help="default_pool_size")
    run.add_argument("--port", type=int, help="listen_port (default: a free port)")
    run.add_argument("--set", dest="settings", action="append", type=_setting, default=[], metavar="NAME=VALUE",
                     help="a [pgbouncer] setting (repeatable; overrides the launcher's)")
    where = run.add_mutually_exclusive_group()
    where.add_argument("--dir", help="an existing directory for its files, kept afterwards")
    where.add_argument("--prefix", default="advlock-pgbouncer.",
                       help="else a new temporary directory named PREFIX..., removed afterwards")
    args = parser.parse_args(argv)

    try:
        target = Target.from_url(args.target)
    except ValueError as e:
        parser.error(str(e))
    signal.signal(signal.SIGTERM, _stop_signal)
    signal.signal(signal.SIGINT, _stop_signal)
    directory = args.dir or tempfile.mkdtemp(prefix=args.prefix)
    running = None
    try:
        running = start(target, args.mode, args.pool_size, directory, args.port, dict(args.settings))
        print(running.url, flush=True)
        sys.stdin.buffer.read()  # until the caller closes it (or exits)
        return 0
    except _Stop:
        return 0
    except LaunchError as e:
        print(f"pgbouncer_launcher: {e}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the stop short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if running is not None:
            running.stop()
        if args.dir is None:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
