"""The run report: building report.json (`build`), its Markdown (`markdown`) and the console tables (`console`)."""

from hyper_es.report.build import (REFERENCES, baseline_best, paired_differences, run_report, split_report,
                                   trained_tasks, write_report)
from hyper_es.report.console import (CONSOLE_WIDTH, directions_table, geometry_table, report_table,
                                     results_table)
from hyper_es.report.markdown import WIDTH, prompt_markdown, report_markdown, splits_markdown

__all__ = ["CONSOLE_WIDTH", "REFERENCES", "WIDTH", "baseline_best", "directions_table", "geometry_table",
           "paired_differences", "prompt_markdown", "report_markdown", "report_table", "results_table", "run_report",
           "split_report", "splits_markdown", "trained_tasks", "write_report"]
