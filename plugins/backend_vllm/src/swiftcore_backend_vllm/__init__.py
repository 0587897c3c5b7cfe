"""swiftcore-backend-vllm: the vLLM inference backend (see :mod:`swiftcore_backend_vllm.engine`)."""
