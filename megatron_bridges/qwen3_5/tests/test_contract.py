"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore_testing.PluginContract)."""

from swiftcore_testing import PluginContract


class TestBridgeQwen3_5Contract(PluginContract):
    plugin = "bridge_qwen3_5"
