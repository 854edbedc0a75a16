"""Performance modelling of stored runs: compute profiles for emulated runs (and, to come,
the fitted model, predictions and the study planner). Reads the database through
``results_db``'s query API only, never from run folders."""
