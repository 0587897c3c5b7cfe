"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore.testing.PluginContract)."""

from swiftcore.testing import PluginContract


class TestTemplateDeepseekContract(PluginContract):
    plugin = "template_deepseek"
