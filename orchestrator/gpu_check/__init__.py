"""The GPU check: the data paths GPU runs take, at several ranks, against an independent
reference, run on a GPU node as ``python -m orchestrator.gpu_check`` (``checks`` says what it
compares; ``launch`` starts each case as a sweep's run; ``rank`` is one rank of a case). It may
import the workloads it starts and the run environment a sweep gives them, nothing of a sweep."""
