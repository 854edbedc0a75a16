"""Publishing a study: the evaluation artifact (``artifact``, with ``scrub``: what of the user's
leaves with it) and the MLflow export. May read every room below it (store, stats, analysis,
report); writes no SQL by hand.
"""
