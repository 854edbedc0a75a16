"""Site descriptions (one YAML per machine); data, not code. See template.yaml."""
