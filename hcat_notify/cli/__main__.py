"""``python -m hcat_notify.cli``: the same as the ``hcat-notify`` command."""

from hcat_notify.cli import run

run()
