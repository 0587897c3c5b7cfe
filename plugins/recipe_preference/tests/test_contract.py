"""Contract tests: swiftcore-recipe-preference passes swiftcore's plugin contract (entry points, light import,
API version, specs and references)."""

try:
    from swiftcore_testing import PluginContract
except ImportError:  # the test kit's former home
    from swiftcore.testing import PluginContract  # type: ignore[no-redef]


class TestPreference(PluginContract):
    plugin = "preference"
