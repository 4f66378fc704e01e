"""`python -m xlacache ...` is the `xlacache` command (`python -m xlacache serve ...`)."""

from xlacache.cli.main import main

main()
