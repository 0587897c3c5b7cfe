"""``swiftcore web-ui --agent-template``: the Web-UI's chat and its training form with an agent template, without a
browser (:class:`swiftcore_webui.ui.WebUI`, the object behind the page's buttons).

The chat builds its engine with swiftcore-infer's ``build_engine``, so ``swiftcore_infer_template`` applies: a base
tiny OLMoE loaded with ``--agent-template hermes`` is prompted with the Hermes rendering of a message that offers a
tool (the prompt's token count is ``olmoe_hermes``'s), where OLMoE's own template drops the tool. The training form
passes the option to ``swiftcore train``, whose run then trains tool rows with ``olmoe_hermes`` (without it, sft
refuses them).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import ADD_TOOL, tool_question, tool_rows

pytest.importorskip("swiftcore_webui")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def plugins() -> Any:
    import swiftcore

    return swiftcore.load_plugins(env={})


@pytest.fixture(scope="module")
def root(tiny_model_dir: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Web-UI root holding a copy of the tiny OLMoE (``olmoe``) and the tool rows (``tools.jsonl``)."""
    root = tmp_path_factory.mktemp("webui-root")
    shutil.copytree(tiny_model_dir("olmoe"), root / "olmoe")
    (root / "tools.jsonl").write_text("".join(json.dumps(r) + "\n" for r in tool_rows()), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def web_ui(plugins: Any, root: Path) -> Iterator[Callable[..., Any]]:
    """``web_ui(**options)``: a :class:`WebUI` on ``root`` with those plugin options (shut down after the module)."""
    from swiftcore_webui.paths import Root
    from swiftcore_webui.ui import WebUI

    made: list[Any] = []

    def make(**options: Any) -> Any:
        made.append(WebUI(Root.at(root), plugins, options))
        return made[-1]

    yield make
    for ui in made:
        ui.shutdown()


def _prompt_tokens(plugins: Any, root: Path, template: str) -> int:
    from transformers import AutoTokenizer

    from swiftcore.api.template import get_template

    tok = AutoTokenizer.from_pretrained(root / "olmoe")
    asked = {"tools": [ADD_TOOL], "messages": tool_question(3, 4)}
    return len(get_template(template, plugins).encode(tok, asked, add_generation_prompt=True).input_ids)


def test_chat_uses_the_agent_template(web_ui: Callable[..., Any], plugins: Any, root: Path) -> None:
    """Loaded with ``--agent-template hermes`` the chat's template is ``olmoe_hermes`` and a message offering the add
    tool is prompted with it (token count); without the option it is OLMoE's own, which drops the tool."""
    counts = {name: _prompt_tokens(plugins, root, name) for name in ("olmoe", "olmoe_hermes")}
    assert counts["olmoe_hermes"] > counts["olmoe"] + 100, counts  # the <tools> block
    for options, template in (({"agent_template": "hermes"}, "olmoe_hermes"), ({}, "olmoe")):
        ui = web_ui(**options)
        loaded = ui.load_model("olmoe")
        assert loaded.template == template and f"template `{template}`" in loaded.describe()
        final = list(ui.reply(tool_question(3, 4), tools=[ADD_TOOL], max_new_tokens=1))[-1]
        assert final.done and final.prompt_tokens == counts[template], (options, final)
        ui.chat.close()


def test_chat_agent_template_refused_on_a_tool_format(web_ui: Callable[..., Any], tiny_model_dir: Any) -> None:
    """On a checkpoint whose template has its own tool format (Qwen3.5) the Load is refused with the hook's message
    (the page shows it), and nothing stays loaded."""
    from swiftcore.api import SwiftcoreError

    ui = web_ui(agent_template="hermes")
    shutil.copytree(tiny_model_dir("qwen3_5"), ui.root.path / "qwen3_5", dirs_exist_ok=True)
    with pytest.raises(SwiftcoreError, match="--agent-template hermes: template 'qwen3_5'.*has its own tool format"):
        ui.load_model("qwen3_5")
    assert ui.chat.loaded is None


def test_training_form_trains_with_the_agent_template(web_ui: Callable[..., Any], root: Path) -> None:
    """The Train tab's run gets ``--agent-template hermes``: it trains the tool rows (which sft refuses on OLMoE's own
    template) and its checkpoint records ``olmoe_hermes`` for infer and deploy."""
    from swiftcore_webui.ui import TrainSettings

    ui = web_ui(agent_template="hermes")
    assert ui.plugin_args("train") == ["--agent-template", "hermes"]
    settings = TrainSettings(
        model="olmoe", dataset="tools.jsonl", output_dir="run", tuner="full", max_steps=2, batch_size=4, max_length=1024
    )
    run = ui.start_training(settings)
    assert run.job.wait(timeout=300) == 0, run.job.output(tail=3000)
    args = json.loads((root / "run" / "checkpoint-2" / "swiftcore_args.json").read_text())
    assert "olmoe_hermes" in json.dumps(args), args
