"""The names in a run folder (RUN/) and in a comparison's folder: every module that reads or writes one names it
from here.

    RUN/recipe.yaml                 the recipe the run was made with
    RUN/directions/<name>/          a direction (PEFT adapter + manifest.json, or source.json when given)
    RUN/directions/baseline/        the GRPO-LoRA baseline (its snapshots under snapshots/step-N/)
    RUN/geometry.json               the directions' norms and cosines
    RUN/search/                     the search: checkpoint.json, generations.jsonl, best.json, result.json
    RUN/es/                         full-parameter ES: config.json, history.jsonl, result.json
    RUN/gradfit/                    the gradient-fitted control: best.json, result.json
    RUN/eval/<row>.json             the final evaluation's test records; RUN/eval/val/: its validation scorings
    RUN/report.json, report.md      the report
"""

RECIPE_FILE = "recipe.yaml"
DIRECTIONS_DIR = "directions"
GEOMETRY_FILE = "geometry.json"
SEARCH_DIR = "search"
ES_DIR = "es"
GRADFIT_DIR = "gradfit"
EVAL_DIR = "eval"
RESULT_FILE = "result.json"  # a finished search's or ES run's record (RUN/search/, RUN/es/)
BEST_FILE = "best.json"  # the search's best genome (RUN/search/best.json)
REPORT_FILE = "report.json"
REPORT_MD = "report.md"
CHECKPOINT_FILE = "checkpoint.json"  # RUN/search/checkpoint.json: the search's resumable state
LOG_FILE = "generations.jsonl"  # RUN/search/generations.jsonl: one record per generation
ES_CONFIG = "config.json"  # RUN/es/config.json: the settings ES's history depends on
ES_HISTORY = "history.jsonl"  # RUN/es/history.jsonl: one record per iteration (the checkpoint)
MANIFEST_FILE = "manifest.json"  # RUN/directions/<name>/manifest.json: a finished GRPO job
ADAPTER_CONFIG = "adapter_config.json"  # RUN/directions/<name>/: a PEFT adapter's config
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # RUN/directions/<name>/: a trained or imported PEFT adapter's tensors
SET_TENSORS = "directions.safetensors"  # RUN/directions/<name>/: an imported direction kept as a saved set

# A comparison's folder (`hyper-es compare`, `hyper-es report`): ROOT/compare.json (the plan), ROOT/summary.json,
# summary.md, accuracy_cost.png; per seed ROOT/seed<N>/lr_grid.json and its arms' run folders ROOT/seed<N>/<arm>/,
# the equal-compute arm's plan in its equal_compute.json.
PLAN_FILE = "compare.json"
SUMMARY_FILE = "summary.json"
SUMMARY_MD = "summary.md"
FIGURE_FILE = "accuracy_cost.png"
GRID_FILE = "lr_grid.json"
EQUAL_FILE = "equal_compute.json"
