"""Inference: engines that generate from swiftcore-encoded prompts (the same template code as training)."""
