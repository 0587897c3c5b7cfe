"""swiftcore-backend-sglang: the SGLang inference backend (see :mod:`swiftcore_backend_sglang.engine`)."""
