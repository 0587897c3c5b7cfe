"""Hook implementations of swiftcore-template-gemma (filled by the templates work)."""

from swiftcore import hookimpl

SWIFTCORE_API = "1.0"


@hookimpl
def swiftcore_register_templates() -> list:
    """The gemma family's templates."""
    return []
