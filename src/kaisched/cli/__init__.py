"""The ``kaisched`` command."""

from __future__ import annotations

import click

from kaisched.cli.schedule import schedule_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kaisched")
def cli() -> None:
    """kaisched: a KAI-compatible GPU cluster scheduler."""


cli.add_command(schedule_command)


def main() -> None:
    cli()
