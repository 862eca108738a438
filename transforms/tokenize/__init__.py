"""Tokenizers: text → ``z = [BOS, x1 … xn, EOS]`` (docs/format.md#tokens), and the byte-level
BPE engine with its split patterns.
"""
