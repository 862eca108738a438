r"""Split patterns in the form tiktoken runs fastest, with the same matches on every text.

The contract: `fast_form` maps a split pattern that a ``tokenizer.json`` holds, character for
character, to a pattern with the same matches on every text, which tiktoken's regex engine
(fancy_regex) runs faster; any other pattern maps to itself (docs/tokenizers.md#engines).

Each fast form makes two rewrites, both exact under backtracking (leftmost, first branch
first) semantics, which fancy_regex has and which the regex crate keeps for the parts that
fancy_regex gives it:

* the branches before the first look-ahead are grouped, in their order, into one
  ``(?:...)``: fancy_regex hands a group without look-around to the regex crate as one
  search, which takes the first branch that matches at a place as backtracking does, where
  the branches alone are tried one after another;
* the last branch ``\s+`` becomes ``\s``. It is reached only at whitespace that no earlier
  branch matched; ``\s+(?!\S)`` failing there means the run of whitespace is one character
  followed by a non-space (a longer run matches it up to its last character, a run at the
  end of the text whole), so ``\s+`` matches that one character. In the Llama 3 and Qwen2
  patterns ``\s*[\r\n]+`` has failed before too (the run holds no ``\r`` or ``\n``), which
  changes nothing in that argument.

Example: ``fast_form(LLAMA3_PATTERN) == LLAMA3_FAST``; ``fast_form(r"\w+")`` is ``\w+``.
"""

from __future__ import annotations

__all__ = ["FAST_FORMS", "GPT2_FAST", "GPT2_PATTERN", "LLAMA3_FAST", "LLAMA3_PATTERN",
           "QWEN2_FAST", "QWEN2_PATTERN", "fast_form"]

# ByteLevel's own split (tokenizers' pre_tokenizers/byte_level.rs), as the GPT-2 encoder had it.
GPT2_PATTERN = (r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
# Here the seven contractions are also written as one branch (`'` then the seven endings):
# they exclude each other, so their order never mattered.
GPT2_FAST = (r"(?:'(?:s|t|re|ve|m|ll|d)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+)|\s+(?!\S)|\s")
# The Split regex of Llama 3's tokenizer.json (also the Hugging Face form of GPT-4's
# cl100k_base), and Qwen2's, which takes digits one at a time.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_FAST = (r"(?:(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+)|\s+(?!\S)|\s")
QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")
QWEN2_FAST = LLAMA3_FAST.replace(r"\p{N}{1,3}", r"\p{N}")
FAST_FORMS = {GPT2_PATTERN: GPT2_FAST, LLAMA3_PATTERN: LLAMA3_FAST, QWEN2_PATTERN: QWEN2_FAST}


def fast_form(pattern: str) -> str:
    """The pattern tiktoken is given for ``pattern``: its fast form, or itself."""
    return FAST_FORMS.get(pattern, pattern)
