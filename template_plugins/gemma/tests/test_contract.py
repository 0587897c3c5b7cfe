"""Contract tests: this plugin passes swiftcore's plugin contract (swiftcore.testing.PluginContract)."""

from swiftcore.testing import PluginContract


class TestTemplateGemmaContract(PluginContract):
    plugin = "template_gemma"
