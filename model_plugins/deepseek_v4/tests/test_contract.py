"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore.testing.PluginContract)."""

from swiftcore.testing import PluginContract


class TestDeepseekV4Contract(PluginContract):
    plugin = "deepseek_v4"
