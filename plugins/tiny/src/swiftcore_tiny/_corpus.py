"""A small built-in training text for tiny tokenizers: English prose, chat, code, numbers, Unicode.

Enough for a few hundred BPE merges, so that ordinary text tokenizes into sensible pieces; the
byte-level (or byte-fallback) alphabet covers everything else.
"""

from __future__ import annotations

__all__ = ["TINY_CORPUS"]

TINY_CORPUS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog. The dog was not amused, and the fox ran away.",
    "Hello! How are you today? I am fine, thank you. What can I help you with?",
    "You are a helpful assistant. Answer the question as well as you can, and think step by step.",
    "What is the capital of France? The capital of France is Paris. Paris is a large city.",
    "Please write a short poem about the sea, the wind and the sun over the water.",
    "The weather today is sunny with a high of 25 degrees and a low of 14 degrees.",
    "Machine learning models learn patterns from data. Training a model means updating its weights.",
    "A language model predicts the next token. The tokenizer splits text into tokens and ids.",
    "To fine-tune a model, prepare a dataset of conversations, choose a template, and train with LoRA.",
    "The user asked for the time in London. The assistant called a tool to get the current time.",
    "Transcribe the following audio. The speaker said: good morning, everyone, and welcome.",
    "Describe this image. The picture shows a cat sitting on a red chair next to a window.",
    "1 + 1 = 2, 2 * 3 = 6, 10 / 4 = 2.5, 7 - 9 = -2, 100% of 42 is 42, and 3.14159 is pi.",
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 2024 2025 2026 1000000.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))\n",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n",
    '{"name": "get_weather", "arguments": {"city": "Berlin", "unit": "celsius"}}',
    "<html><body><p>Hello, world!</p></body></html>",
    "Thinking about the problem: first we read the input, then we compute the answer, then we check it.",
    "I think the answer is yes. Let me explain why. There are three reasons, and each one matters.",
    "Once upon a time there was a little girl who lived in a village near the forest.",
    "She went to the market to buy bread, milk, eggs, apples and a bottle of water.",
    "Good night! See you tomorrow. Have a nice day. Thanks a lot. You're welcome. It's fine.",
    "Café, naïve, résumé, façade, jalapeño, Zürich, São Paulo, Kraków, Ελλάδα, Москва.",
    "你好，世界！今天天气很好。我们一起去公园散步吧。中文分词测试。",
    "こんにちは、世界。日本語のテキストです。ありがとうございます。",
    "안녕하세요, 세계! 한국어 텍스트입니다.",
    "مرحبا بالعالم. هذا نص عربي قصير.",
    "Emoji: 😀 🎉 👍 🚀 ❤️ ✨ 🐍 — and symbols: © ® ™ € £ ¥ § ¶ • … → ← ≤ ≥ ≠ ∞.",
    "Tabs\tand\tnew\nlines\n\nand   multiple   spaces   are   text   too.",
    "Question: Which planet is known as the red planet? Answer: Mars is known as the red planet.",
    "The system prompt sets the behaviour; the user message asks; the assistant message answers.",
)
