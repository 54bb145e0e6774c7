"""The ``federation`` command line (typer): :mod:`.main` holds the app."""
