"""``swiftcore web-ui``: a local gradio page to make tiny models, train, chat, export and check plugins.

gradio is imported only when the command runs (it takes seconds); ``--help`` and ``swiftcore --help`` do not.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import tempfile
import threading
from pathlib import Path
from typing import Any

import click

from swiftcore.api.cli import CliState, PluginOptionsCommand, pass_state, plugin_option

__all__ = ["is_loopback", "web_ui"]


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _stop_on_signals() -> None:
    """SIGTERM (and SIGINT, even when the shell started the server in the background with it ignored) stop the
    server the way Ctrl-C does, so that a training run it started is stopped and its private folder removed."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)
        signal.signal(signal.SIGINT, _interrupt)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only accepts connections from this machine (``127.0.0.1``, ``::1``, ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command("web-ui", cls=PluginOptionsCommand)  # plugins add options (swiftcore_addoption, command="web-ui")
@click.option(
    "--root",
    default=".",
    show_default=True,
    type=click.Path(exists=True, file_okay=False),
    help="The folder the page is confined to: every model folder, dataset and output folder it takes must "
    "resolve inside it (relative paths are read from it; symlinks are followed before checking, and one that "
    "leads outside is refused). Commands run there.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on. The default only accepts connections from this machine; the page has no login, "
    "so another address lets anyone who reaches it train and run models under --root (to reach it from elsewhere, "
    "tunnel to it: docs/webui.md).",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A Host name (and page origin) accepted besides localhost/127.0.0.1/[::1], e.g. the name a reverse proxy "
    "with a login forwards (repeatable). Other names get HTTP 421, other sites' pages 403.",
)
@click.option(
    "--port",
    default=7860,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Port to listen on.",
)
@plugin_option
@pass_state
def web_ui(
    state: CliState,
    plugin_specs: tuple[str, ...],
    root: str,
    host: str,
    port: int,
    allowed_hosts: tuple[str, ...],
    **options: Any,
) -> None:
    """Start a local web page (gradio) to make, train, chat with and export models.

    \b
    Tabs:
      Model    the families the installed plugins provide; make a tiny
               random checkpoint of one (swiftcore make-tiny)
      Train    swiftcore train in a subprocess, with live progress and the
               loss plot read from the run's logs.jsonl
      Chat     stream replies from a checkpoint (swiftcore infer's engine,
               in this process); attach images or audio for families
               that take them
      Export   merge a LoRA checkpoint into its base (export --merge-lora)
      Plugins  swiftcore plugins, and --check

    \b
    Options plugins add (e.g. --agent-template of swiftcore-plugin-agent-
    templates) apply to every model the Chat tab loads, and those that
    swiftcore train takes too are passed to the Train tab's runs.

    \b
    Every path the page accepts must resolve inside --root, and the page
    serves no file of the disk but those uploaded to it. It answers only
    requests naming a loopback host (or --allowed-host) and refuses other
    sites' pages. Ctrl-C stops it (and a training run it started).

    \b
    Example:
      swiftcore web-ui --root ./work --port 7860
    """
    from swiftcore_webui.paths import Root
    from swiftcore_webui.ui import WebUI

    confined = Root.at(root)
    plugins = state.plugins(plugin_specs)
    if not is_loopback(host):
        click.echo(
            f"warning: --host {host}: the page has no login; anyone who can reach {host}:{port} can train, run and "
            f"export models under {confined.path}",
            err=True,
        )
    # gradio's uploads and cache go to a private folder, removed on exit; set before gradio is imported (it reads
    # these when its modules load). No usage statistics are sent.
    private = tempfile.mkdtemp(prefix="swiftcore-webui-")
    os.environ["GRADIO_TEMP_DIR"] = str(Path(private) / "uploads")
    os.environ["GRADIO_EXAMPLES_CACHE"] = str(Path(private) / "examples")
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    ui = None
    _stop_on_signals()
    try:
        from swiftcore_serve import Listener

        from swiftcore_webui.app import CSS, build_app
        from swiftcore_webui.server import guarded_app

        ui = WebUI(confined, plugins, options)  # the values of the options plugins added
        demo = build_app(ui)
        demo.queue()
        listener = Listener(guarded_app(demo, css=CSS, allowed_hosts=allowed_hosts), host=host, port=port)
        try:
            listener.start()
        except OSError as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(f"swiftcore web-ui: {listener.url} (root {confined.path}); Ctrl-C stops it")
        try:
            listener.wait()  # until Ctrl-C (or SIGTERM)
        except KeyboardInterrupt:
            listener.stop()
    finally:
        if ui is not None:
            ui.shutdown()
        shutil.rmtree(private, ignore_errors=True)
