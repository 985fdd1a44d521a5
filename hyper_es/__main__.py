from hyper_es.cli import app

app(prog_name="hyper-es")
