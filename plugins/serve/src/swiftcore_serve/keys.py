"""Where a server's API key comes from, and when a server may run without one (:func:`resolve_api_key`).

One rule for ``swiftcore deploy`` and ``swiftcore rollout`` (on this distribution's face, beside the guard that
checks the key): a key is required, from a file (``--api-key-file``) or the environment; ``--no-api-key`` is
allowed on a loopback address only, and says so out loud.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from swiftcore.api import SwiftcoreError

__all__ = ["checked_key", "read_key_file", "resolve_api_key"]


def resolve_api_key(
    key_file: str | None,
    key: str | None,
    no_key: bool,
    host: str,
    *,
    env: str,
    command: str = "swiftcore deploy",
) -> str | None:
    """The API key: ``--api-key-file`` or ``--api-key`` (one of them), else ``$env``; None with ``--no-api-key``.

    The command line wins over the environment, as usual; two keys on the command line, or ``--no-api-key`` with
    a key anywhere, are contradictions and refused rather than guessed at.

    Args:
        key_file: ``--api-key-file``.
        key: ``--api-key`` (None for a command without the option: a key on the command line shows in ``ps``).
        no_key: ``--no-api-key``.
        host: the address the server binds.
        env: the environment variable that may hold the key.
        command: the command, as messages name it.

    Raises:
        SwiftcoreError: no key and no ``--no-api-key``, a contradiction, an empty or unusable key, or
            ``--no-api-key`` on an address other machines can reach.
    """
    from swiftcore_serve.guard import is_loopback

    value_env = os.environ.get(env)
    given = [name for name, value in (("--api-key-file", key_file), ("--api-key", key)) if value is not None]
    if no_key:
        if given or value_env is not None:
            raise SwiftcoreError(f"--no-api-key contradicts {', '.join(given) or '$' + env}: drop one")
        if not is_loopback(host):
            raise SwiftcoreError(
                f"--no-api-key on --host {host} would let anyone who can reach this machine use this server; "
                "serve on 127.0.0.1, or give a key (--api-key-file)"
            )
        return None
    if len(given) > 1:
        raise SwiftcoreError("--api-key-file and --api-key both give the key: keep one")
    if key_file is not None:
        where, value = "--api-key-file", read_key_file(Path(key_file))
    elif key is not None:
        where, value = "--api-key", key
        click.echo(f"warning: --api-key shows the key to every user of this machine (ps); prefer --api-key-file "
                   f"or ${env}", err=True)  # fmt: skip
    elif value_env is not None:
        where, value = f"${env}", value_env
    else:
        raise SwiftcoreError(
            f"no API key: give one with --api-key-file FILE or ${env}"
            + (" (or --api-key, visible in `ps`)" if command == "swiftcore deploy" else "")
            + ", or serve without one on this machine only with --no-api-key"
        )
    return checked_key(value, where)


def checked_key(value: str, where: str) -> str:
    """``value`` stripped, refused when empty or not printable ASCII (it travels in an HTTP header).

    Raises:
        SwiftcoreError: naming ``where`` the key came from.
    """
    value = value.strip()
    if not value:
        raise SwiftcoreError(f"the API key from {where} is empty: an empty key would protect nothing")
    if not all("!" <= c <= "~" for c in value):
        raise SwiftcoreError(
            f"the API key from {where} must be printable ASCII without spaces (it travels in an HTTP header)"
        )
    return value


def read_key_file(path: Path, option: str = "--api-key-file") -> str:
    """The first line of ``path``, stripped; warns when other users may read the file.

    Raises:
        SwiftcoreError: the file cannot be read, or its key is empty or not header-safe.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SwiftcoreError(f"{option} {path}: cannot read it ({exc})") from exc
    if os.name == "posix" and path.stat().st_mode & 0o077:
        click.echo(f"warning: {path} is readable by other users; chmod 600 it", err=True)
    return lines[0] if lines else ""
