"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore_testing.PluginContract)."""

from swiftcore_testing import PluginContract


class TestDeepseekV4Contract(PluginContract):
    plugin = "deepseek_v4"
