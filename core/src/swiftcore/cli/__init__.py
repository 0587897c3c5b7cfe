"""The ``swiftcore`` command line. Sub-commands live one per module and are imported lazily."""
