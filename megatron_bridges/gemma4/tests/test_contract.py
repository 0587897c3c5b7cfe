"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore.testing.PluginContract)."""

from swiftcore.testing import PluginContract


class TestBridgeGemma4Contract(PluginContract):
    plugin = "bridge_gemma4"
