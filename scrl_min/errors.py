"""The package's errors, at the bottom of its imports so that every file can raise them."""


class ScrlError(ValueError):
    """A bad input, config or engine output, named precisely (which field, sequence, position)."""


class RolloutError(ScrlError):
    """A sampler's output breaks the rollout contract (`core.validate_rollout`)."""
