"""Report: what a person reads from finished studies.

Holds the trials table and the study-folder reader (``tables``), the Pareto and roofline plots
(``plots``), the per-study HTML report (``html_report``), the comparison of several studies'
fronts (``compare_fronts``), the regression check between two runs (``compare``), the committed
reference records (``record``) and the several-worker check (``workers_check``). Each reads what a
study wrote (``results/<study>/study.json``, ``trials.parquet``) or an Optuna study.

May import: ``sweep.common`` and the analysis (whose results it formats: it prices nothing
itself). Never the study, the caches, and no measurement code.
"""
