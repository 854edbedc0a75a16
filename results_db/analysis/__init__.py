"""Analyses of stored runs: what a configuration is (one definition), compare, regression, the
network, NCCL and binding audits, the papers' claims, reproduction. Imports ``store`` and ``stats``; no SQL text.
"""
