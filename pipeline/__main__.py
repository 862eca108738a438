"""``python -m pipeline --input … --output … --tokenizer …`` (and the ``token-windows`` command)."""

import sys

from pipeline import NO_BEAM


def main() -> None:
    """Run the job's command line; exit 2, saying what to install, where Beam is missing."""
    try:
        import apache_beam  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name != "apache_beam":
            raise  # Beam is there but broken: its own error says more
        print(NO_BEAM, file=sys.stderr)
        sys.exit(2)
    from pipeline.heap import leave_loaded_out
    from pipeline.run import cli

    leave_loaded_out()  # Beam and the rest are loaded: later collections skip them
    cli()


if __name__ == "__main__":
    main()
