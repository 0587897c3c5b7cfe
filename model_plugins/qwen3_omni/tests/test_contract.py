"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore_testing.PluginContract)."""

from swiftcore_testing import PluginContract


class TestQwen3OmniContract(PluginContract):
    plugin = "qwen3_omni"
