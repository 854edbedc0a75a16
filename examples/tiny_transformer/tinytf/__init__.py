"""A user's own package: a small causal transformer and a generated token corpus.

scalestudy imports these by path (``model=tinytf.nets:make_model``,
``dataset=tinytf.data:make_dataset``) or, once the package is installed
(``pip install -e examples/tiny_transformer``), by the short names its
``pyproject.toml`` registers (``model=tiny_transformer dataset=markov_tokens``).
"""
