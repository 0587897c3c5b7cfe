"""Drive ``_msswift_worker.py`` in the peer virtual environment from the swiftcore side."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from common import PEER_PYTHON, RAW

__all__ = ["PeerWorker", "PeerError"]

WORKER = Path(__file__).resolve().parent / "_msswift_worker.py"


class PeerError(RuntimeError):
    """The ms-swift worker failed a request; the message carries its traceback."""


class PeerWorker:
    """A long-lived ms-swift process answering one JSON request per line (see ``_msswift_worker.py``)."""

    def __init__(self) -> None:
        RAW.mkdir(parents=True, exist_ok=True)
        self._log = (RAW / "msswift_worker.log").open("w")
        # stderr goes to a file: a full pipe would block the worker.
        self._proc = subprocess.Popen([str(PEER_PYTHON), str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._log, text=True, bufsize=1)

    def request(self, op: str, **kwargs: Any) -> dict[str, Any]:
        """Send one request and return the reply; raise :class:`PeerError` when it failed."""
        assert self._proc.stdin and self._proc.stdout
        self._proc.stdin.write(json.dumps({"op": op, **kwargs}) + "\n")
        self._proc.stdin.flush()
        for line in self._proc.stdout:
            if line.startswith("@@"):
                reply = json.loads(line[2:])
                if not reply.get("ok"):
                    raise PeerError(f"ms-swift worker, {op}: {reply.get('error')}\n{reply.get('traceback', '')}")
                return reply
            self._log.write(line)
        raise PeerError(f"ms-swift worker exited during {op!r}; see {RAW / 'msswift_worker.log'}")

    def close(self) -> None:
        """Ask the worker to quit and wait for it."""
        if self._proc.poll() is None:
            try:
                assert self._proc.stdin
                self._proc.stdin.write('{"op": "quit"}\n')
                self._proc.stdin.close()
                self._proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
        self._log.close()

    def __enter__(self) -> PeerWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
