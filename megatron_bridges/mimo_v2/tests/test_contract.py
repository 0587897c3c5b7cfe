"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore_testing.PluginContract)."""

from swiftcore_testing import PluginContract


class TestBridgeMimoContract(PluginContract):
    plugin = "bridge_mimo_v2"
