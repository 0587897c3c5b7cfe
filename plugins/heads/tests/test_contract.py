"""Contract tests: swiftcore-heads passes swiftcore's plugin contract, every head built on tiny qwen3_5."""

from swiftcore_testing import PluginContract


class TestHeadsContract(PluginContract):
    plugin = "heads"
    also_load = ("qwen3_5",)
    head_backbone = "qwen3_5"
