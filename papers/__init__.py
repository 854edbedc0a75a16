"""The papers' claims as data: one YAML per paper, loaded by results_db/analysis/paper_claims.py."""
