"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore.testing.PluginContract)."""

from swiftcore.testing import PluginContract


class TestBridgeDeepseekV4Contract(PluginContract):
    plugin = "bridge_deepseek_v4"
