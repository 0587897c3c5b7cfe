"""swiftcore-webui: ``swiftcore web-ui``, a local gradio page over swiftcore's CLI and inference engine.

Importing this package imports neither gradio nor torch; the command imports gradio when it starts the page.
"""

from __future__ import annotations
