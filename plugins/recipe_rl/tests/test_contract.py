"""Contract tests: swiftcore-recipe-rl passes swiftcore's plugin contract (light import, specs, references)."""

from swiftcore_testing import PluginContract


class TestRL(PluginContract):
    plugin = "rl"
