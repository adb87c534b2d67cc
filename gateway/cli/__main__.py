"""`python -m gateway.cli …`: the `plumbline` command."""

from gateway.cli import app

if __name__ == "__main__":
    app(prog_name="plumbline")
