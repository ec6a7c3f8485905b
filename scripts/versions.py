#!/usr/bin/env python3
"""One version everywhere: the extension's (Cargo.toml, which advlock.control takes as
@CARGO_VERSION@) is the version of every client and of the SQL edition. Prints each one found and
exits 1 when any differs (scripts/lint.sh runs it as the `versions` lint; scripts/release.sh
refuses to build a release before it passes).

Read:
  extension        Cargo.toml [package] version
  SQL edition      edition/advlock_sql.sql: its header and advlock_edition_version()
  Python client    clients/python/src/advlock/_version.py __version__ when that file exists,
                   clients/python/pyproject.toml [project] version (when not dynamic); and a literal __version__
                   in the package's __init__.py, if it has one
  Ruby gems        clients/*/lib/*/version.rb VERSION (a client with a *.gemspec; the gemspec
                   reads it from there)
  other clients    clients/*/package.json "version" (and the Node client's `export const version`
                   in src/index.ts), clients/*/Cargo.toml [package] version,
                   clients/*/pyproject.toml [project] version (a client this script cannot read
                   a version from is an error: teach it here)

Usage: scripts/versions.py [REPO]     (default: the repository holding this script)
"""
import json
import re
import sys
import tomllib
from pathlib import Path

repo = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])


def literal(path: Path, pattern: str):
    m = re.search(pattern, path.read_text(), re.M)
    return m.group(1) if m else None


def python_versions(client: Path):
    """(where, version) of a Python client: the single-sourced _version.py, else pyproject's."""
    found = []
    project = tomllib.loads((client / "pyproject.toml").read_text()).get("project", {})
    packages = sorted(p.parent for p in (client / "src").glob("*/__init__.py")) if (client / "src").is_dir() else []
    single = [p / "_version.py" for p in packages if (p / "_version.py").is_file()]
    for v in single:
        found.append((v, literal(v, r'^__version__\s*=\s*["\']([^"\']+)["\']')))
    if "version" in project:
        found.append((client / "pyproject.toml", project["version"]))
    elif not single:
        found.append((client / "pyproject.toml", None))   # dynamic, but from where?
    for p in packages:
        v = literal(p / "__init__.py", r'^__version__\s*=\s*["\']([^"\']+)["\']')
        if v is not None:
            found.append((p / "__init__.py", v))
    return found


def main():
    cargo = tomllib.loads((repo / "Cargo.toml").read_text())["package"]["version"]
    versions = [(repo / "Cargo.toml", cargo)]
    edition = repo / "edition" / "advlock_sql.sql"
    if edition.is_file():
        versions.append((edition, literal(edition, r"^-- advlock (\S+), SQL edition"), "its header"))
        versions.append((edition, literal(edition, r"advlock_edition_version\(\)[^;]*?RETURN '([^']+)'"),
                         "advlock_edition_version()"))
    for client in sorted(p for p in (repo / "clients").iterdir() if p.is_dir()) if (repo / "clients").is_dir() else []:
        if (client / "pyproject.toml").is_file():
            versions += python_versions(client)
        elif (client / "package.json").is_file():
            versions.append((client / "package.json", json.loads((client / "package.json").read_text()).get("version")))
            index = client / "src" / "index.ts"   # the Node client's `version` export, if it has one
            if index.is_file() and (v := literal(index, r'^export const version = "([^"]+)";')) is not None:
                versions.append((index, v))
        elif list(client.glob("*.gemspec")):
            # A gem: its gemspec reads lib/NAME/version.rb, the one place (VERSION = "x.y.z").
            for v in sorted(client.glob("lib/*/version.rb")) or [client / "lib"]:
                versions.append((v, literal(v, r'^\s*VERSION\s*=\s*["\']([^"\']+)["\']') if v.is_file() else None))
        elif (client / "Cargo.toml").is_file():
            versions.append((client / "Cargo.toml", tomllib.loads((client / "Cargo.toml").read_text())["package"].get("version")))
        else:
            versions.append((client, None))
    bad = 0
    for path, version, *what in versions:
        where = f"{path.relative_to(repo)}{' (' + what[0] + ')' if what else ''}"
        if version is None:
            print(f"versions: {where}: no version found (a client must carry the extension's version)")
            bad += 1
        elif version != cargo:
            print(f"versions: {where}: {version}, but the extension (Cargo.toml) is {cargo}")
            bad += 1
        else:
            print(f"versions: {where}: {version}")
    if bad:
        print(f"versions: {bad} of {len(versions)} disagree with the extension's {cargo}: one version for "
              "the extension, the SQL edition and every client (set them, then run scripts/build_edition.sh)")
        return 1
    print(f"versions: all {len(versions)} are {cargo}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
