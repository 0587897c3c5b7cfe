"""The page's tabs, one module each: :mod:`.model`, :mod:`.train`, :mod:`.chat`, :mod:`.export`, :mod:`.plugins`.

Each module has ``build(ui)``, which lays its tab out (inside the page's ``gr.Tabs``) and returns its components,
and ``wire(ui, tab, ...)``, which connects their events. Two steps, not one: some buttons write to another tab (a
new checkpoint appears in the Train and Chat lists; "Chat with this checkpoint" opens the Chat tab), and those
components exist only once every tab is laid out. :func:`swiftcore_webui.app.build_app` lays the tabs out, then
wires them in the same order. What the tabs share is in :mod:`.common`.

Importing this package imports nothing; its modules import gradio.
"""
