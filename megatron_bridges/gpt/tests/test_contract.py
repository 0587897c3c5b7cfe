"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore.testing.PluginContract)."""

from swiftcore.testing import PluginContract


class TestBridgeGptContract(PluginContract):
    plugin = "bridge_gpt"
