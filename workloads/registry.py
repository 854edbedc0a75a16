"""Names the workload implements, importable without torch.

The orchestrator validates configs against these before anything is submitted; it
must stay cheap to import, so the implementations are looked up lazily elsewhere.
"""

ALGORITHMS = ("sync",)
MODELS = ("small_cnn",)
DATASETS = ("digits",)
