"""``make demo``'s outcome: the tiny model answers the held-out questions after training, not before.

Runs the demo's own function with its defaults (the same steps, data and model as ``make demo``), so the
README's promise is asserted, not just that the demo exits 0.
"""

from __future__ import annotations

from pathlib import Path


def test_demo_learns_the_held_out_task(tmp_path: Path) -> None:
    from swiftcore_tiny import run_demo

    result = run_demo(tmp_path / "demo", echo=lambda *_: None)
    assert result.before <= 0.1, result.rows
    assert result.after >= 0.9, result.rows
    assert result.training.final_loss is not None and result.training.final_loss < 0.1
