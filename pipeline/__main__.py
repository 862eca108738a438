"""``python -m pipeline --input … --output … --tokenizer …``"""

from pipeline.run import main

if __name__ == "__main__":
    main()
