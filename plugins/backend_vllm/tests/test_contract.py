"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore.testing.PluginContract)."""

from swiftcore.testing import PluginContract


class TestBackendVllmContract(PluginContract):
    plugin = "backend_vllm"
