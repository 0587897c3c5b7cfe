"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore.testing.PluginContract)."""

from swiftcore.testing import PluginContract


class TestBridgeQwen3AsrContract(PluginContract):
    plugin = "bridge_qwen3_asr"
