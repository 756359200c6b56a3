"""The Typer app: parse options, call operations, render. No broker logic here."""
