"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore_testing.PluginContract)."""

from swiftcore_testing import PluginContract


class TestBridgeDeepseekV4Contract(PluginContract):
    plugin = "bridge_deepseek_v4"
