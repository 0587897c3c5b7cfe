"""ms-swift ``--external_plugins`` file: give ms-swift's Qwen-VL loaders an image processor without torchvision.

Loaded only inside ms-swift processes (peer virtual environment). Why it exists: ms-swift 4.6.0 always
loads Qwen3.5 as the multimodal class and, even for text-only batches, runs
``processor.image_processor`` on a dummy image in its forward hook. transformers' ``Qwen3VLProcessor``
needs a video processor, and video processors need torchvision, which this CPU-only machine cannot
have (PyPI's build is CUDA and breaks ``import transformers``). So the benchmark's copy of the
checkpoint ships no ``processor_config.json`` (ms-swift then loads the tokenizer), and this plugin
attaches transformers' PIL image processor, built from the same settings, to that tokenizer.
"""

from __future__ import annotations

import json
import os

from swift.model.models.qwen import Qwen2VLLoader

SETTINGS = "swiftcore_bench_image_processor.json"
_original = Qwen2VLLoader.get_processor


def _get_processor(self, model_dir, config):
    processor = _original(self, model_dir, config)
    path = os.path.join(model_dir, SETTINGS)
    if not hasattr(processor, "image_processor") and os.path.exists(path):
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        with open(path, encoding="utf-8") as fh:
            settings = json.load(fh)
        settings.pop("image_processor_type", None)
        processor.image_processor = Qwen2VLImageProcessorPil(**settings)
    return processor


Qwen2VLLoader.get_processor = _get_processor
