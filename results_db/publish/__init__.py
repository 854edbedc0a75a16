"""Publishing a study: the evaluation artifact (``artifact``; its README ``readme``, written as an
artifact-evaluation checklist asks; the runs' own files and flat tables ``run_files``; ``scrub``:
what of the user's leaves with it) and the MLflow export. May read every room below it (store,
stats, analysis, report); writes no SQL by hand.
"""
