"""Names the workload implements, importable without torch.

The orchestrator validates configs against these before anything is submitted; it
must stay cheap to import, so the implementations are looked up lazily elsewhere.
"""

ALGORITHMS = ("sync", "ddp", "horovod", "eager_solo", "eager_majority", "async_ps")
# algorithm -> devices it runs on
ALGORITHM_DEVICES = {"sync": ("cpu",), "ddp": ("cpu", "cuda"), "horovod": ("cpu",), "eager_solo": ("cpu",),
                     "eager_majority": ("cpu",), "async_ps": ("cpu",)}
DEVICES = ("cpu", "cuda")

# model -> the kind of input it takes
MODELS = {"small_cnn": "image", "resnet20": "image", "resnet50": "image", "nt3": "vector", "lstm": "sequence"}
# dataset -> (kind of samples, needs dataset.path)
DATASETS = {
    "digits": ("image", False),
    "synthetic_images": ("image", False),
    "cifar10": ("image", True),
    "imagefolder": ("image", True),
    "nt3_synthetic": ("vector", False),
    "sequences": ("sequence", False),
}
