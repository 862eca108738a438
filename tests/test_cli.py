"""The command lines' own flags: --version and the usage lines of both entry points."""

from __future__ import annotations

import sys

import pytest

from pipeline.run import main


def _help(capsys, monkeypatch, argv0: str, *args: str) -> str:
    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_version(capsys, monkeypatch):
    from importlib import metadata

    import apache_beam

    out = _help(capsys, monkeypatch, "/venv/bin/token-windows", "--version")
    assert out == (f"token-windows {metadata.version('token-windows')} (apache-beam "
                   f"{apache_beam.__version__}, Python {sys.version.split()[0]})\n")


@pytest.mark.parametrize(("argv0", "prog"), [
    ("/venv/bin/token-windows", "token-windows"),
    ("/src/pipeline/__main__.py", "python -m pipeline"),
])
def test_usage_names_the_command_and_its_required_options(capsys, monkeypatch, argv0, prog):
    out = _help(capsys, monkeypatch, argv0, "--help")
    assert out.splitlines()[0] == (
        f"usage: {prog} --input PATTERN [--input PATTERN ...] --tokenizer "
        "{bytes,MODEL.model,tokenizer.json} --output DIR [options] [beam options]")
    for flag in ("--bos-token TOKEN", "--eos-token TOKEN", "--version"):
        assert flag in out


def test_inspect_usage(capsys):
    from reader import inspect

    with pytest.raises(SystemExit):
        inspect.run(["--help"])
    assert capsys.readouterr().out.startswith("usage: python -m reader.inspect [-h]")
