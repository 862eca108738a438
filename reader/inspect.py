"""``python -m reader.inspect OUT`` (or ``token-windows-inspect``): look at a finished dataset.

The command's entry; what it does is `reader.tools.inspect`.
"""

from reader.tools.inspect import main

__all__ = ["main"]

if __name__ == "__main__":
    main()
