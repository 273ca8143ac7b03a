"""`python -m polymimic_train` is the `train` command."""

from polymimic_train.app import cli

cli()
