"""`python -m xlacache.server ...` is `xlacache serve ...`."""

import typer

from xlacache.cli.serve import serve_command


def main() -> None:
    typer.run(serve_command)


if __name__ == "__main__":
    main()
