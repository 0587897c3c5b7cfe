"""Hook implementations of swiftcore-template-deepseek (filled by the templates work)."""

from swiftcore import hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_templates() -> list:
    """The deepseek family's templates."""
    return []
