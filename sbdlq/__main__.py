from sbdlq.cli.main import run

run()
