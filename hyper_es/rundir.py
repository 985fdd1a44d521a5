"""Names in a run folder (RUN/) that more than one layer reads."""

EVAL_DIR = "eval"  # RUN/eval/<row>.json: the final evaluation's test records; RUN/eval/val/: its validation scorings
