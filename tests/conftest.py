"""Fixtures shared by the modules of tests/: a tiny Qwen3-Omni (thinker, talker, Code2Wav) served by ``swiftcore
deploy``, for the speech-out tests (tests/test_audio_speech.py, tests/test_chat_audio_out.py).

Module-scoped: each module that asks gets its own checkpoint and server (started on its first use, stopped at its
end), so modules stay independent under ``pytest -n 2 --dist loadfile``. Nothing heavy is imported here: a module
that does not ask for these fixtures pays nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: The served model name of :func:`omni_client`'s server.
OMNI_MODEL = "omni"
#: Its API key.
OMNI_API_KEY = "speech-key"


def _cli(*args: str, timeout: int = 600) -> Any:
    """Run ``swiftcore ARGS`` as a user would (:func:`swiftcore_testing.user_env`); the finished process."""
    import subprocess
    import sys

    from swiftcore_testing import user_env

    proc = subprocess.run(
        [sys.executable, "-m", "swiftcore.cli.main", *args], capture_output=True, text=True, timeout=timeout,
        env=user_env(),
    )  # fmt: skip
    assert proc.returncode == 0, f"swiftcore {args[0]} failed:\n{proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def tiny_omni(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Qwen3-Omni checkpoint with its talker (``swiftcore make-tiny``), made once per module."""
    path = tmp_path_factory.mktemp("speech") / "tiny-omni"
    _cli("make-tiny", "qwen3_omni_moe", str(path))
    return path


@pytest.fixture(scope="module")
def omni_client(tiny_omni: Path) -> Iterator[Any]:
    """``swiftcore deploy`` of :func:`tiny_omni` as :data:`OMNI_MODEL`, once per module; an ``openai`` client for it."""
    openai = pytest.importorskip("openai")
    from swiftcore_testing import deploy_process, user_env

    env = user_env(SWIFTCORE_API_KEY=OMNI_API_KEY)
    with deploy_process("--model", str(tiny_omni), served_model_name=OMNI_MODEL, env=env) as (base, _):
        yield openai.OpenAI(base_url=f"{base}/v1", api_key=OMNI_API_KEY, max_retries=0, timeout=300)
