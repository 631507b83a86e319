"""Results in formats other tools read."""
