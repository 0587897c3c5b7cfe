"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore.testing.PluginContract)."""

from swiftcore.testing import PluginContract


class TestTemplateQwenContract(PluginContract):
    plugin = "template_qwen"
