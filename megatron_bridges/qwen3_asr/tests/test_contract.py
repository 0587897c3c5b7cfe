"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore_testing.PluginContract)."""

from swiftcore_testing import PluginContract


class TestBridgeQwen3AsrContract(PluginContract):
    plugin = "bridge_qwen3_asr"
