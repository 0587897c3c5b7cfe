"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore.testing.PluginContract)."""

from swiftcore.testing import PluginContract


class TestQwen35Contract(PluginContract):
    plugin = "qwen3_5"
