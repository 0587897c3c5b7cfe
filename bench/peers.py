"""Create ``.venv-peers/``: ms-swift 4.6.0 in its own virtual environment, for the side-by-side benchmarks.

ms-swift is a benchmark dependency only; swiftcore never imports it. Steps (each one is needed):

1. ``python3 -m venv .venv-peers``;
2. torch 2.13.0 first, from the local CPU wheel (pip's find-links): a bare ``torch`` requirement
   would pull a multi-GB CUDA build;
3. ``ms-swift==4.6.0`` with the transformers/peft it accepts (it pins transformers <5.20, peft <0.21),
   ``qwen_vl_utils`` (ms-swift's Qwen3.5 loader refuses to start without it) and ``msgspec`` (ms-swift's GRPO
   trainer imports it, ``swift/rlhf_trainers/utils.py:18``, without declaring it: vLLM brings it on a GPU box;
   without it ``swift rlhf --rlhf_type grpo`` dies with ``ModuleNotFoundError: No module named 'msgspec'``);
   an environment built before ``msgspec`` was added gets it when it is reused (:data:`LATER`);
4. remove torchvision/torchaudio/triton if anything pulled them: PyPI's torchvision is a CUDA build
   whose ops fail to register next to a CPU torch, which breaks ``import transformers``;
5. ``qwen_vl_utils`` imports torchvision at module level although only its video readers use it: make
   that import optional (text-only data never reaches those readers).

Usage: ``python bench/peers.py [--force]``; set-up seconds go to ``bench/raw/peers.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-peers"
PYTHON = VENV / "bin" / "python"
SWIFT = VENV / "bin" / "swift"
STAMP = VENV / ".swiftcore-bench-ready"
RAW = ROOT / "bench" / "raw" / "peers.json"
PINS = ["ms-swift==4.6.0", "transformers==5.19.0", "peft>=0.20,<0.21", "qwen_vl_utils==0.0.14", "msgspec==0.23.0"]
#: Packages added to :data:`PINS` after environments were built with it (module -> requirement): a reused
#: environment that lacks one gets it (figure 11, ms-swift's GRPO, needs ``msgspec``).
LATER = {"msgspec": "msgspec==0.23.0"}
_OLD_IMPORT = ("import torchvision\nfrom packaging import version\nfrom PIL import Image\nimport numpy as np\n"
               "from torchvision import io, transforms\nfrom torchvision.transforms import InterpolationMode\n")
_NEW_IMPORT = ("from packaging import version\nfrom PIL import Image\nimport numpy as np\n"
               "try:  # patched by swiftcore bench/peers.py: only the video readers need torchvision\n"
               "    import torchvision\n    from torchvision import io, transforms\n"
               "    from torchvision.transforms import InterpolationMode\n"
               "except ImportError:\n    torchvision = io = transforms = InterpolationMode = None\n")


def _pip(*args: str) -> None:
    subprocess.run([str(PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check", *args], check=True)


def patch_qwen_vl_utils() -> bool:
    """Make ``qwen_vl_utils``' torchvision import optional; True when the file was (or already is) patched."""
    out = subprocess.run([str(PYTHON), "-c", "import importlib.util as u; print(u.find_spec('qwen_vl_utils').origin)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    path = Path(out).parent / "vision_process.py"
    text = path.read_text(encoding="utf-8")
    if "torchvision = io = transforms = InterpolationMode = None" in text:
        return True
    if _OLD_IMPORT not in text:
        return False
    path.write_text(text.replace(_OLD_IMPORT, _NEW_IMPORT), encoding="utf-8")
    return True


def add_missing() -> list[str]:
    """Install the :data:`LATER` packages a reused environment lacks; return their module names."""
    code = "import importlib.util as u, sys; print(' '.join(m for m in sys.argv[1:] if u.find_spec(m) is None))"
    missing = subprocess.run([str(PYTHON), "-c", code, *LATER], capture_output=True, text=True,
                             check=True).stdout.split()
    if missing:
        _pip(*(LATER[m] for m in missing))
    return missing


def versions() -> dict[str, str]:
    """Versions of the peer environment's main packages."""
    code = ("import importlib.metadata as m, json; print(json.dumps({d: m.version(d) for d in "
            "('ms-swift', 'torch', 'transformers', 'peft', 'accelerate', 'trl', 'datasets')}))")
    return json.loads(subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True, check=True).stdout)


def ensure_peers(force: bool = False) -> dict:
    """Create (or reuse) ``.venv-peers`` and return ``{"setup_s", "versions", "reused", ...}``.

    Args:
        force: delete and rebuild the environment even if it is ready.

    Raises:
        subprocess.CalledProcessError: a pip step failed (its output is above).
    """
    if force and VENV.exists():
        shutil.rmtree(VENV)
    if STAMP.exists():
        info = json.loads(STAMP.read_text())
        info["reused"] = True
        added = add_missing()
        if added:
            info["added_on_reuse"] = added
        return info
    start = time.perf_counter()
    # From a venv's interpreter, ``-m venv`` builds on the base interpreter: no nesting.
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    _pip("torch==2.13.0")
    _pip(*PINS)
    present = subprocess.run([str(PYTHON), "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True,
                             check=True).stdout
    removed = [p for p in ("torchvision", "torchaudio", "triton") if f"\n{p}==" in "\n" + present]
    if removed:
        subprocess.run([str(PYTHON), "-m", "pip", "uninstall", "-y", "-q", *removed], check=True)
    patched = patch_qwen_vl_utils()
    info = {"setup_s": round(time.perf_counter() - start, 1), "versions": versions(), "removed": removed,
            "qwen_vl_utils_patched": patched, "reused": False}
    STAMP.write_text(json.dumps(info, indent=2))
    return info


def main() -> None:
    """Set up the peer environment and record how long it took."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild from scratch")
    args = parser.parse_args()
    info = ensure_peers(args.force)
    RAW.parent.mkdir(parents=True, exist_ok=True)
    RAW.write_text(json.dumps(info, indent=2))
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
