"""``python -m pipeline --input … --output … --tokenizer …``"""

from pipeline.run import cli

if __name__ == "__main__":
    cli()
