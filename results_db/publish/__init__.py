"""Publishing a study: the evaluation artifact and the MLflow export. May read every room below it
(store, stats, analysis, report); writes no SQL by hand.
"""
