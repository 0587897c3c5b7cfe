"""The inference contract every engine shares: request and result types, errors, and building an installed
backend's engine from its spec (``backends``). The engines themselves are plugins (``swiftcore-infer``).
"""
