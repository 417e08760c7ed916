"""designzoo sweep: Hydra app, Optuna study, child-process trials, measurement and analysis."""
