"""The plugin API version and the compatibility rule.

A plugin module declares ``SWIFTCORE_API = "MAJOR.MINOR"``: the API it was written against. It is
compatible with this core when the majors are equal and the plugin's minor is not newer than ours
(new minors only add optional hooks and spec fields with defaults).
"""

from __future__ import annotations

from swiftcore.errors import IncompatiblePluginError

__all__ = ["API_VERSION", "API_VERSION_STRING", "check_api_version"]

API_VERSION: tuple[int, int] = (1, 5)
API_VERSION_STRING = f"{API_VERSION[0]}.{API_VERSION[1]}"


def _parse(value: object) -> tuple[int, int] | None:
    if not isinstance(value, str):
        return None
    parts = value.strip().split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def check_api_version(declared: object, who: str, core_version: str) -> None:
    """Raise :class:`IncompatiblePluginError` unless ``declared`` is compatible with this core.

    Args:
        declared: the plugin's ``SWIFTCORE_API`` value (``None`` when it has none).
        who: how to name the plugin in the message, e.g. ``"plugin 'acme' (swiftcore-plugin-acme 0.2.0)"``.
        core_version: the installed swiftcore version, quoted in the message.
    """
    if declared is None:
        raise IncompatiblePluginError(
            f'{who} declares no SWIFTCORE_API. Add SWIFTCORE_API = "{API_VERSION_STRING}" to its '
            f"plugin module (the plugin API swiftcore {core_version} provides)."
        )
    parsed = _parse(declared)
    if parsed is None:
        raise IncompatiblePluginError(
            f"{who} has SWIFTCORE_API = {declared!r}; expected a string 'MAJOR.MINOR' such as {API_VERSION_STRING!r}."
        )
    major, minor = parsed
    if major == API_VERSION[0] and minor <= API_VERSION[1]:
        return
    if (major, minor) > API_VERSION:
        fix = (
            f"Upgrade swiftcore (pip install -U swiftcore), or pin an older release of the plugin "
            f"that targets API {API_VERSION_STRING}."
        )
    else:
        fix = (
            "Upgrade the plugin to a release written for this swiftcore, or pin an older swiftcore "
            f"(pip install 'swiftcore<{API_VERSION[0]}')."
        )
    raise IncompatiblePluginError(
        f"{who} targets plugin API {declared}; swiftcore {core_version} provides {API_VERSION_STRING}. {fix}"
    )
