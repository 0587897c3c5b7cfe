"""Hook implementations of swiftcore-template-qwen (filled by the templates work)."""

from swiftcore import hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_templates() -> list:
    """The qwen family's templates."""
    return []
