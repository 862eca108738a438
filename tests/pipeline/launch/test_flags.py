"""`pipeline.launch.flags`: the command line's parser (--version, the usage line) and misspelled
flags refused with the one meant."""

from __future__ import annotations

import sys

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipeline.job import main
from pipeline.launch.flags import check_flags, parser


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


def test_the_parser_knows_every_flag_of_the_job() -> None:
    args = parser().parse_args(["--input", "a", "--input", "b", "--tokenizer", "bytes",
                                "--output", "o", "--window", "8"])
    assert (args.inputs, args.tokenizer, args.output, args.window) == (["a", "b"], "bytes", "o", 8)
    with pytest.raises(SystemExit):
        parser().parse_args(["--window", "eight"])


def check(*argv: str) -> None:
    check_flags(list(argv), PipelineOptions(list(argv)))


@pytest.mark.parametrize(("flag", "message"), [
    ("--widow", "--widow is not an option; did you mean --window?"),
    ("--strid", "--strid is not an option; did you mean --stride?"),
    ("--text_field", "--text_field is not an option; did you mean --text-field? (this job's "
                     "own flags are spelled with dashes, Beam's with underscores)"),
    ("--num_shards=3", "--num_shards is not an option; did you mean --num-shards? (this job's "
                       "own flags are spelled with dashes, Beam's with underscores)"),
    ("--direct_num_worker", "--direct_num_worker is not an option; did you mean "
                            "--direct_num_workers?"),
    ("--zzzz", "--zzzz is not an option; see --help"),
])
def test_a_misspelled_flag_is_refused_with_the_one_meant(flag: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        check("--input", "x", flag, "3")
    assert str(info.value) == message


def test_known_flags_values_and_beams_own_flags_pass() -> None:
    check("--input", "x", "--window=8", "--stride", "4", "--direct_num_workers", "2",
          "--runner", "DirectRunner", "positional", "--")


def test_runners_that_forward_flags_get_those_that_resemble_none_of_ours() -> None:
    check("--runner", "FlinkRunner", "--flink_master_address_xyz", "h:1")
    with pytest.raises(ValueError, match="did you mean --window"):
        check("--runner", "FlinkRunner", "--widow", "3")
    with pytest.raises(ValueError, match="see --help"):
        check("--runner", "DirectRunner", "--flink_master_address_xyz", "h:1")
